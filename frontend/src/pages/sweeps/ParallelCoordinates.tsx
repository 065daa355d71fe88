import { useMemo } from 'react';
import type { SweepDetail } from '../../api/sweeps';
import { formatNumber } from '../../lib/format';
import { parallelModel, VALUE_COLORS, valueColor, type Line } from './parcoords';
import { formatParam } from './values';

// Pixels: axes GAP apart, tick labels left of each axis (PAD_LEFT leaves them room at the first), names above.
const GAP = 170;
const PAD_LEFT = 90;
const PAD_RIGHT = 50;
const TOP = 48;
const PLOT_H = 280;
const BOTTOM = 14;
const NAME_CHARS = 24;
const TICK_CHARS = 12;

const axisX = (i: number) => PAD_LEFT + i * GAP;
const y = (u: number) => TOP + (1 - u) * PLOT_H;
const cut = (text: string, n: number) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

function lineTitle(line: Line, sweep: Pick<SweepDetail, 'metric'>): string {
  const { trial } = line;
  const params = Object.entries(trial.params).map(([path, v]) => `${path} ${formatParam(v)}`);
  const state = trial.state === 'complete' ? '' : ` (${trial.state})`;
  return [`Trial ${trial.number}${state}${line.best ? ', best' : ''}: ${sweep.metric} ${formatNumber(trial.value)}`, ...params].join('\n');
}

function Legend({ count, faint }: { count: number; faint: number }) {
  return (
    <p className="parcoords-legend muted">
      <span>best</span>
      <span className="parcoords-gradient" style={{ background: `linear-gradient(to right, ${VALUE_COLORS.join(', ')})` }} />
      <span>worst</span>
      <span>
        · {count} trial{count === 1 ? '' : 's'} with a value{faint ? `, ${faint} stopped early or failed (faint)` : ''} · the best drawn thick
      </span>
    </p>
  );
}

type Props = { sweep: Pick<SweepDetail, 'space' | 'trial_list' | 'metric' | 'goal' | 'best'> };

/** Each trial as a line across one axis per searched path and one for the metric, coloured by its value. */
export function ParallelCoordinates({ sweep }: Props) {
  const { axes, lines } = useMemo(() => parallelModel(sweep), [sweep]);
  const width = axisX(axes.length - 1) + PAD_RIGHT;
  const height = TOP + PLOT_H + BOTTOM;
  if (lines.length === 0) return <p className="muted">No trial has a value yet: each draws a line here once its run has finished.</p>;
  return (
    <figure className="parcoords">
      <div className="parcoords-scroll">
        <svg width={width} height={height} role="img" aria-label={`Trials across ${axes.map((a) => a.path).join(', ')}`}>
          <g className="parcoords-axes">
            {axes.map((axis, i) => (
              <line key={axis.path} x1={axisX(i)} x2={axisX(i)} y1={y(1)} y2={y(0)} />
            ))}
          </g>
          <g className="parcoords-lines">
            {lines.map((line) => (
              <polyline
                key={line.trial.number}
                points={line.points.map((p) => `${axisX(p.axis)},${y(p.u).toFixed(1)}`).join(' ')}
                stroke={valueColor(line.badness)}
                data-trial={line.trial.number}
                data-state={line.trial.state}
                data-faint={line.faint || undefined}
                data-best={line.best || undefined}
              >
                <title>{lineTitle(line, sweep)}</title>
              </polyline>
            ))}
          </g>
          {axes.map((axis, i) => (
            <g key={axis.path} className="parcoords-axis" data-path={axis.path}>
              <text x={axisX(i)} y={TOP - 24} textAnchor="middle" className="parcoords-name">
                {cut(axis.path, NAME_CHARS)}
                <title>{axis.path}</title>
              </text>
              {axis.note && (
                <text x={axisX(i)} y={TOP - 10} textAnchor="middle" className="parcoords-note">
                  {axis.note}
                </text>
              )}
              {axis.ticks.map((tick, k) => (
                <g key={k}>
                  <line x1={axisX(i) - 4} x2={axisX(i)} y1={y(tick.u)} y2={y(tick.u)} />
                  <text x={axisX(i) - 7} y={y(tick.u)} dominantBaseline="middle" textAnchor="end">
                    {cut(tick.label, TICK_CHARS)}
                    {tick.label.length > TICK_CHARS && <title>{tick.label}</title>}
                  </text>
                </g>
              ))}
            </g>
          ))}
        </svg>
      </div>
      <figcaption>
        <Legend count={lines.length} faint={lines.filter((l) => l.faint).length} />
      </figcaption>
    </figure>
  );
}
