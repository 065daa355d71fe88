import type { ReactNode } from 'react';
import { SPARSE_POINTS } from './smoothing';

/** Smoothing weight from `smooth=`, clamped to what ema() accepts. */
export function parseSmoothing(raw: string | null, fallback = 0.6): number {
  const value = raw == null ? fallback : Number(raw);
  return Number.isFinite(value) ? Math.min(0.99, Math.max(0, value)) : fallback;
}

interface Props {
  /** Prefix of the controls' ids, unique on the page. */
  id: string;
  smoothing: number;
  logScale: boolean;
  /** Called with the URL parameter to change (`smooth`, `log`) and its new value (null: remove it). */
  onParam: (name: string, value: string | null) => void;
  children?: ReactNode;
}

/** The smoothing slider (dense series only: smoothing.ts) and log-scale toggle shared by the run's charts and Compare. */
export function ChartControls({ id, smoothing, logScale, onParam, children }: Props) {
  return (
    <form className="chart-controls" onSubmit={(e) => e.preventDefault()}>
      <label htmlFor={id}>
        Smoothing <output htmlFor={id}>{smoothing.toFixed(2)}</output>
      </label>
      <input
        id={id}
        type="range"
        min={0}
        max={0.99}
        step={0.01}
        value={smoothing}
        onChange={(e) => onParam('smooth', e.target.value)}
        aria-describedby={`${id}-hint`}
      />
      <span id={`${id}-hint`} className="muted">
        eval/*, learning rates and series under {SPARSE_POINTS} points stay raw
      </span>
      <label className="check">
        <input type="checkbox" checked={logScale} onChange={(e) => onParam('log', e.target.checked ? '1' : null)} />
        Log scale
      </label>
      {children}
    </form>
  );
}
