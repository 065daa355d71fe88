import { describe, expect, it } from 'vitest';
import type uPlot from 'uplot';
import { drawMarks, type MarkSpan } from './nonFinite';

/** A plot 400 px wide from x=50, steps 0..100 across it, with a canvas that records its labels. */
function fakePlot() {
  const labels: Array<{ text: string; x: number; y: number; width: number }> = [];
  const ctx = {
    save() {}, restore() {}, beginPath() {}, rect() {}, clip() {}, fillRect() {},
    font: '', textBaseline: '', globalAlpha: 1, fillStyle: '',
    canvas: { width: 500 },
    measureText: (text: string) => ({ width: text.length * 7 }),
    fillText(text: string, x: number, y: number) {
      labels.push({ text, x, y, width: text.length * 7 });
    },
  };
  const bbox = { left: 50, top: 10, width: 400, height: 150 };
  const u = { ctx, bbox, width: 500, valToPos: (v: number) => bbox.left + (v / 100) * bbox.width };
  return { u: u as unknown as uPlot, labels, bbox };
}

const span = (x0: number, kind: MarkSpan['kind'] = 'NaN'): MarkSpan => ({ x0, x1: x0, open: false, kind });

describe('drawMarks', () => {
  it("writes a mark's kind right of its edge, inside the plot", () => {
    const { u, labels } = fakePlot();
    drawMarks(u, [span(30)], 'red');
    expect(labels).toEqual([{ text: 'NaN', x: 50 + 120 + 4, y: 14, width: 21 }]);
  });

  it('flips the label left of a mark at the right edge, and keeps one off the left edge inside', () => {
    const { u, labels, bbox } = fakePlot();
    drawMarks(u, [span(99, '+inf'), span(-5, 'NaN/inf')], 'red');
    const right = bbox.left + bbox.width;
    const [atRight, atLeft] = labels;
    expect(atRight!.x + atRight!.width).toBeLessThanOrEqual(right);
    expect(atRight!.x + atRight!.width).toBeLessThan(u.valToPos(99, 'x', true)); // left of the edge line
    expect(atLeft!.x).toBeGreaterThanOrEqual(bbox.left);
    for (const l of labels) expect(l.y).toBeGreaterThanOrEqual(bbox.top);
  });
});
