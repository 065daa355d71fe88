import { useCallback, useLayoutEffect, useState, type RefObject } from 'react';

/** Rows rendered beyond each edge of the view, so a quick scroll shows lines, not blank space, first. */
const OVERSCAN = 20;
/** The viewport until the box is laid out (jsdom never lays it out). */
const UNMEASURED_PX = 600;

export interface RowRange {
  /** First row to render. */
  start: number;
  /** One past the last row to render. */
  end: number;
}

/** Which of `count` rows of `rowPx` each are in view when the box is scrolled `top` px down. */
export function visibleRange(top: number, viewportPx: number, rowPx: number, count: number): RowRange {
  const rows = Math.ceil(viewportPx / rowPx);
  // A filter can shrink the rows under a box scrolled far down: show the last screenful, not nothing.
  const first = Math.max(0, Math.min(Math.floor(top / rowPx), count - rows));
  return { start: Math.max(0, first - OVERSCAN), end: Math.min(count, first + rows + OVERSCAN) };
}

/**
 * A window over `count` rows of one fixed height inside the scrolling element `box`: the caller renders
 * rows start..end inside a spacer `height` px tall, moved down start * rowPx, so the scrollbar is the
 * whole list's and the DOM holds a screenful.
 */
export function useVirtualRows(box: RefObject<HTMLElement | null>, count: number, rowPx: number) {
  const [top, setTop] = useState(0);
  const [viewportPx, setViewportPx] = useState(UNMEASURED_PX);

  useLayoutEffect(() => {
    const el = box.current;
    if (!el) return;
    const measure = () => setViewportPx(el.clientHeight || UNMEASURED_PX);
    measure();
    if (typeof ResizeObserver === 'undefined') return;
    const observer = new ResizeObserver(measure);
    observer.observe(el);
    return () => observer.disconnect();
  }, [box]);

  /** Scroll so the box's top edge is `px` down the list (clamped, so Infinity is the bottom). */
  const scrollTo = useCallback(
    (px: number) => {
      const el = box.current;
      // The box's own padding makes its real bottom a little further down than the rows' (jsdom has none).
      const bottom = Math.max(count * rowPx - viewportPx, el ? el.scrollHeight - el.clientHeight : 0);
      const target = Math.max(0, Math.min(px, bottom));
      if (el) el.scrollTop = target;
      setTop(target);
    },
    [box, count, rowPx, viewportPx],
  );
  const onScroll = useCallback(() => {
    if (box.current) setTop(box.current.scrollTop);
  }, [box]);

  return { ...visibleRange(top, viewportPx, rowPx, count), height: count * rowPx, viewportPx, scrollTo, onScroll };
}
