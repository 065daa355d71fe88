import { useId } from 'react';
import type { Sample } from '../../../api/types';
import { formatNumber } from '../../../lib/format';
import { pairScores, rewardSummary, rolloutScores, type Pair, type SampleGroup, type Score } from './groups';

/** A block of text under its label (Prompt, Response, Reference answer), the label naming it for screen readers. */
export function LabelledText({ label, text, field }: { label: string; text: string | null; field: string }) {
  const id = useId();
  return (
    <div className="labelled" data-field={field}>
      <div className="field-label" id={id}>
        {label}
      </div>
      {text == null ? (
        <p className="muted">none in the dataset</p>
      ) : (
        <pre aria-labelledby={id} className={field}>
          {text || <span className="muted">(empty)</span>}
        </pre>
      )}
    </div>
  );
}

function Scores({ scores }: { scores: Score[] }) {
  if (!scores.length) return null;
  return (
    <ul className="scores" aria-label="Scores">
      {scores.map((s) => (
        <li key={s.name} data-score={s.name}>
          <span className="muted">{s.name}</span> <span className="num">{typeof s.value === 'number' ? formatNumber(s.value) : s.value}</span>
          {s.unit && <span className="muted"> {s.unit}</span>}
        </li>
      ))}
    </ul>
  );
}

const plural = (n: number, noun: string) => `${n} ${noun}${n === 1 ? '' : 's'}`;

/** A multi-turn episode's response turn by turn: the policy's turns (trained on) and the environment's answers, as the policy read them. */
function Turns({ label, turns }: { label: string; turns: NonNullable<Sample['turns']> }) {
  const id = useId();
  return (
    <div className="labelled" data-field="response">
      <div className="field-label" id={id}>
        {label} · {plural(turns.filter((t) => t.role === 'policy').length, 'policy turn')}
      </div>
      <ol className="turns" aria-labelledby={id}>
        {turns.map((turn, i) => (
          <li key={i} className={`turn turn-${turn.role}`} data-role={turn.role}>
            <span className="turn-role">{turn.role === 'policy' ? 'Policy' : 'Environment'}</span>
            <pre>{turn.text || <span className="muted">(empty)</span>}</pre>
          </li>
        ))}
      </ol>
    </div>
  );
}

function Rollout({ sample, n, of }: { sample: Sample; n: number; of: number }) {
  const label = of > 1 ? `Response ${n} of ${of}` : 'Response';
  return (
    <article className="sample" data-label="rollout" data-index={sample.index}>
      <Scores scores={rolloutScores(sample)} />
      {sample.turns?.length ? <Turns label={label} turns={sample.turns} /> : <LabelledText label={label} text={sample.response} field="response" />}
    </article>
  );
}

function Rollouts({ samples }: { samples: Sample[] }) {
  const summary = samples.length > 1 ? rewardSummary(samples) : null;
  return (
    <div className="rollouts">
      {summary && (
        <p className="muted group-summary">
          {samples.length} responses · reward mean {formatNumber(summary.mean)}, min {formatNumber(summary.min)}, max {formatNumber(summary.max)}
        </p>
      )}
      {samples.map((s, i) => (
        <Rollout key={s.id} sample={s} n={i + 1} of={samples.length} />
      ))}
    </div>
  );
}

function PairSide({ sample, side }: { sample: Sample | undefined; side: 'chosen' | 'rejected' }) {
  const title = side === 'chosen' ? 'Chosen' : 'Rejected';
  if (!sample) return <p className="muted">No {side} response logged.</p>;
  return (
    <article className={`sample pair-${side}`} data-label={side}>
      <Scores scores={pairScores(sample)} />
      <LabelledText label={`${title} response`} text={sample.response} field="response" />
    </article>
  );
}

function PairView({ pair }: { pair: Pair }) {
  return (
    <div className="pair">
      <p className="pair-margin">
        <span className="muted">margin (chosen − rejected)</span>{' '}
        <span className="num" data-testid="pair-margin">
          {formatNumber(pair.margin)}
        </span>
      </p>
      <div className="beside">
        <PairSide sample={pair.chosen} side="chosen" />
        <PairSide sample={pair.rejected} side="rejected" />
      </div>
    </div>
  );
}

function Generation({ sample }: { sample: Sample }) {
  return (
    <div className="beside" data-label="generation">
      <article className="sample" data-label="generation">
        <LabelledText label="Model's answer" text={sample.response} field="response" />
      </article>
      <article className="sample reference">
        <LabelledText label="Reference answer" text={sample.reference} field="reference" />
      </article>
    </div>
  );
}

/** What a group holds, without its prompt (following one prompt shows the prompt once for every step). */
export function GroupBody({ group }: { group: SampleGroup }) {
  return (
    <>
      {group.pairs.map((pair, i) => (
        <PairView key={i} pair={pair} />
      ))}
      {group.generations.map((s) => (
        <Generation key={s.id} sample={s} />
      ))}
      {group.rollouts.length > 0 && <Rollouts samples={group.rollouts} />}
    </>
  );
}

/** One prompt at one step: the prompt once, then every response to it. */
export function SampleGroupView({ group }: { group: SampleGroup }) {
  return (
    <section className="sample-group" data-step={group.step} data-prompt-hash={group.promptHash} aria-label={`Prompt at step ${group.step}`}>
      <LabelledText label="Prompt" text={group.prompt} field="prompt" />
      <GroupBody group={group} />
    </section>
  );
}
