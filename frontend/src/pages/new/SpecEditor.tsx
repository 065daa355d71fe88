import { useRef, type KeyboardEvent, type RefObject } from 'react';

interface Props {
  id: string;
  value: string;
  onChange: (text: string) => void;
  invalid: boolean;
  describedBy: string;
  areaRef: RefObject<HTMLTextAreaElement | null>;
}

const INDENT = '  ';

/** Inserts text at the caret; execCommand keeps the browser's undo history where it exists. */
function insertAtCaret(area: HTMLTextAreaElement, text: string, onChange: (text: string) => void) {
  let done = false;
  try {
    done = typeof document.execCommand === 'function' && document.execCommand('insertText', false, text);
  } catch {
    done = false;
  }
  if (!done) {
    area.setRangeText(text, area.selectionStart, area.selectionEnd, 'end');
    onChange(area.value);
  }
}

/**
 * A plain textarea with a line-number gutter. Tab indents by two spaces; Escape then Tab (or
 * Shift+Tab) leaves the field, so the keyboard is never trapped.
 */
export function SpecEditor({ id, value, onChange, invalid, describedBy, areaRef }: Props) {
  const gutter = useRef<HTMLPreElement>(null);
  const escaped = useRef(false);
  const lineCount = value.split('\n').length;

  const onKeyDown = (e: KeyboardEvent<HTMLTextAreaElement>) => {
    if (e.key === 'Escape') {
      escaped.current = true;
      return;
    }
    const plainTab = e.key === 'Tab' && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey;
    if (plainTab && !escaped.current) {
      e.preventDefault();
      insertAtCaret(e.currentTarget, INDENT, onChange);
      return;
    }
    escaped.current = false;
  };

  return (
    <div className="spec-editor-wrap">
      <pre className="spec-gutter" aria-hidden="true" ref={gutter}>
        {Array.from({ length: lineCount }, (_, i) => i + 1).join('\n')}
      </pre>
      <textarea
        id={id}
        ref={areaRef}
        className="spec-editor"
        spellCheck={false}
        autoCapitalize="off"
        autoCorrect="off"
        wrap="off"
        value={value}
        rows={30}
        aria-invalid={invalid}
        aria-describedby={describedBy}
        onChange={(e) => onChange(e.target.value)}
        onKeyDown={onKeyDown}
        onFocus={() => (escaped.current = false)}
        onScroll={(e) => {
          if (gutter.current) gutter.current.scrollTop = e.currentTarget.scrollTop;
        }}
      />
    </div>
  );
}

/** Moves the caret to a 1-based line of the textarea, selects it and scrolls it into view. */
export function goToLine(area: HTMLTextAreaElement, line: number) {
  const lines = area.value.split('\n');
  const offset = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
  area.focus();
  area.setSelectionRange(offset, offset + (lines[line - 1]?.length ?? 0));
  const lineHeight = parseFloat(getComputedStyle(area).lineHeight) || area.scrollHeight / Math.max(1, lines.length);
  area.scrollTop = Math.max(0, (line - 3) * lineHeight);
}
