import { useId } from 'react';
import type { Stage } from '../../api/pipelines';
import { layoutStages, NODE_H, NODE_W } from './layout';
import { StageNode } from './StageNode';

interface Props {
  stages: Stage[];
  /** Retry buttons wait while any action is on its way: its answer may change which stages can retry. */
  busy: boolean;
  onRetry: (stage: string) => void;
}

/** The stages as boxes laid out by dependency depth, with the needs drawn as arrows behind them. */
export function PipelineGraph({ stages, busy, onRetry }: Props) {
  const arrow = useId();
  const { nodes, edges, width, height } = layoutStages(stages);
  const byName = new Map(stages.map((s) => [s.name, s]));
  return (
    <div className="pipeline-graph-scroll">
      <div className="pipeline-graph" style={{ width, height }}>
        <svg width={width} height={height} aria-hidden="true">
          <defs>
            <marker id={arrow} viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
              <path d="M0,0 L10,5 L0,10 z" />
            </marker>
          </defs>
          {edges.map((e) => (
            <path key={`${e.from}->${e.to}`} d={e.d} markerEnd={`url(#${arrow})`} data-from={e.from} data-to={e.to} />
          ))}
        </svg>
        <ol aria-label="Stages">
          {nodes.map((n) => (
            <StageNode
              key={n.name}
              stage={byName.get(n.name)!}
              layer={n.layer}
              style={{ left: n.x, top: n.y, width: NODE_W, height: NODE_H }}
              retrying={busy}
              onRetry={onRetry}
            />
          ))}
        </ol>
      </div>
    </div>
  );
}
