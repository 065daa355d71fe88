import { describe, expect, it } from 'vitest';
import { SseParser } from './parser';

describe('SseParser', () => {
  it('parses a whole message with event, id and JSON data', () => {
    const p = new SseParser();
    const out = p.feed('id: c1\nevent: metrics\ndata: [{"step":1}]\n\n');
    expect(out).toEqual([{ event: 'metrics', data: '[{"step":1}]', id: 'c1' }]);
    expect(p.lastEventId).toBe('c1');
  });

  it('survives any chunk boundary, including inside a field name and a CRLF', () => {
    const text = 'id: a\r\nevent: logs\r\ndata: one\r\n\r\nid: b\r\ndata: two\r\n\r\n';
    for (let cut = 1; cut < text.length; cut++) {
      const p = new SseParser();
      const out = [...p.feed(text.slice(0, cut)), ...p.feed(text.slice(cut))];
      expect(out.map((e) => [e.event, e.data, e.id])).toEqual([
        ['logs', 'one', 'a'],
        ['message', 'two', 'b'],
      ]);
    }
  });

  it('feeds one character at a time', () => {
    const p = new SseParser();
    const out = [...'event: status\ndata: {"x":1}\n\n'].flatMap((c) => p.feed(c));
    expect(out).toEqual([{ event: 'status', data: '{"x":1}', id: undefined }]);
  });

  it('joins multi-line data with newlines', () => {
    const p = new SseParser();
    expect(p.feed('data: first\ndata: second\ndata:third\n\n')[0]?.data).toBe('first\nsecond\nthird');
  });

  it('ignores comments (keep-alives) and events without data, but keeps their id', () => {
    const p = new SseParser();
    expect(p.feed(': keep-alive\n\n')).toEqual([]);
    expect(p.feed('id: only-id\n\n')).toEqual([]);
    expect(p.lastEventId).toBe('only-id');
    const [e] = p.feed('data: x\n\n');
    expect(e?.id).toBe('only-id'); // the id carries over, as EventSource does
  });

  it('does not emit an unfinished event', () => {
    const p = new SseParser();
    expect(p.feed('event: logs\ndata: partial\n')).toEqual([]);
    expect(p.feed('\n')).toHaveLength(1);
  });
});
