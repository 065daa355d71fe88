/** One Server-Sent Event as the spec (html.spec.whatwg.org, "event stream interpretation") defines it. */
export interface SseEvent {
  event: string;
  data: string;
  id: string | undefined;
}

/**
 * Incremental text/event-stream parser: feed it chunks as they arrive, whatever their
 * boundaries (a line, a field or a CRLF may be split across chunks), and get whole events back.
 */
export class SseParser {
  private buffer = '';
  private data: string[] = [];
  private event = '';
  private id: string | undefined;
  private sawCr = false;
  /** The last id seen, kept across events as the spec says; send it as Last-Event-ID. */
  lastEventId: string | undefined;

  feed(chunk: string): SseEvent[] {
    // A CR at the end of the previous chunk already ended a line; its LF must not end another.
    if (this.sawCr && chunk.startsWith('\n')) chunk = chunk.slice(1);
    this.sawCr = false;
    this.buffer += chunk;
    const out: SseEvent[] = [];
    let start = 0;
    for (let i = 0; i < this.buffer.length; i++) {
      const c = this.buffer[i];
      if (c !== '\n' && c !== '\r') continue;
      const line = this.buffer.slice(start, i);
      if (c === '\r') {
        if (i + 1 === this.buffer.length) this.sawCr = true;
        else if (this.buffer[i + 1] === '\n') i++;
      }
      start = i + 1;
      const event = this.line(line);
      if (event) out.push(event);
    }
    this.buffer = this.buffer.slice(start);
    return out;
  }

  private line(line: string): SseEvent | null {
    if (line === '') return this.dispatch();
    if (line.startsWith(':')) return null; // comment: the server's keep-alive
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.id = value;
    return null;
  }

  private dispatch(): SseEvent | null {
    if (this.id !== undefined) this.lastEventId = this.id;
    const hadData = this.data.length > 0;
    const event: SseEvent = { event: this.event || 'message', data: this.data.join('\n'), id: this.lastEventId };
    this.data = [];
    this.event = '';
    this.id = undefined;
    return hadData ? event : null;
  }
}
