import type { PipelineSummary } from '../../api/pipelines';

/** A pipeline's stages in order, each a badge in its status' colour that names the stage; the status is in words too. */
export function StageStrip({ stages }: { stages: PipelineSummary['stages'] }) {
  return (
    <ol className="stage-strip" aria-label="Stages">
      {stages.map((s) => (
        <li key={s.name} data-stage={s.name} data-status={s.status}>
          <span className={`badge badge-${s.status}`} title={`${s.name}: ${s.status}`}>
            {s.name}
            <span className="sr-only">: {s.status}</span>
          </span>
        </li>
      ))}
    </ol>
  );
}
