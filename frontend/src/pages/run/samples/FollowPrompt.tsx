import type { Sample } from '../../../api/types';
import { groupByStep } from './groups';
import { GroupBody, LabelledText } from './SampleViews';

/** One prompt's responses across steps: the prompt once, then a card per step, wrapping to the page's width. */
export function FollowPrompt({ samples }: { samples: Sample[] }) {
  const groups = groupByStep(samples);
  if (!groups.length) return <p className="muted">No samples of this prompt.</p>;
  return (
    <div className="follow-prompt">
      <LabelledText label="Prompt" text={groups[0]!.prompt} field="prompt" />
      <div className="step-cards">
        {groups.map((g) => (
          <section key={g.key} className="step-card" data-step={g.step} aria-label={`Step ${g.step}`}>
            <h3>Step {g.step}</h3>
            <GroupBody group={g} />
          </section>
        ))}
      </div>
    </div>
  );
}
