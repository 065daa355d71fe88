import { useEffect, useState } from 'react';
import { useQueryClient } from '@tanstack/react-query';
import { queryKeys } from '../../api/queryKeys';
import { isTerminal } from '../../api/runStatus';
import { ErrorNote } from '../../components/ErrorNote';
import { useRunContext } from './context';
import { FollowPrompt } from './samples/FollowPrompt';
import { groupSamples } from './samples/groups';
import { SampleTable } from './samples/SampleTable';
import { SampleGroupView } from './samples/SampleViews';
import { StepPicker } from './samples/StepPicker';
import { useLatestStep, useNeighbourSteps, usePrompts, usePromptSamples, useStepSamples } from './samples/useSamples';
import { useSamplesView, type SamplesView } from './samples/view';
import './samples/samples.css';

/** Why there is nothing to show, true for a run still going and for one that has ended. */
function NoSamples({ ended }: { ended: boolean }) {
  return (
    <p className="muted" data-testid="no-samples">
      {ended
        ? 'This run ended without logging any samples (PPO and GRPO log them when samples_to_log is above 0; SFT, DPO and reward-model runs at their evaluations).'
        : 'No samples yet: PPO and GRPO runs log them every few steps, SFT, DPO and reward-model runs at their evaluations.'}
    </p>
  );
}

function ViewToggle({ view, onView, disabled }: { view: SamplesView; onView: (view: SamplesView) => void; disabled: boolean }) {
  return (
    <fieldset className="view-toggle" disabled={disabled}>
      <legend>View</legend>
      {(['cards', 'table'] as const).map((v) => (
        <label key={v} className="check">
          <input type="radio" name="samples-view" value={v} checked={view === v} onChange={() => onView(v)} />
          {v === 'cards' ? 'Cards' : 'Table'}
        </label>
      ))}
    </fieldset>
  );
}

export function SamplesTab() {
  const { run, bus } = useRunContext();
  const queryClient = useQueryClient();
  const [step, setStep] = useState<number | null>(null);
  const [byReward, setByReward] = useState(false);
  const [prompt, setPrompt] = useState('');
  const [view, setView] = useSamplesView();

  // New samples refresh the latest step, the shown step and the prompt being followed.
  useEffect(() => bus.on('samples', () => void queryClient.invalidateQueries({ queryKey: queryKeys.samples.all(run.id) })), [bus, queryClient, run.id]);

  const latest = useLatestStep(run.id);
  const shownStep = step ?? latest.data?.step ?? null;
  const neighbours = useNeighbourSteps(run.id, prompt ? null : shownStep);
  const atStep = useStepSamples(run.id, prompt ? null : shownStep, byReward);
  const prompts = usePrompts(run.id);
  const acrossSteps = usePromptSamples(run.id, prompt);

  if (latest.data?.count === 0) return <NoSamples ended={isTerminal(run.status)} />;
  const groups = atStep.data ? groupSamples(atStep.data.data) : [];
  // The table is for responses (GRPO, PPO); pairs and generations stay cards in either view.
  const tabled = view === 'table' ? groups.filter((g) => g.rollouts.length > 0) : [];
  const carded = groups.filter((g) => !tabled.includes(g));

  return (
    <div className="samples-tab">
      <form className="sample-controls" onSubmit={(e) => e.preventDefault()}>
        <StepPicker
          step={shownStep}
          previous={neighbours.previous}
          next={neighbours.next}
          latest={latest.data?.step ?? null}
          disabled={!!prompt}
          onStep={setStep}
        />
        <label className="check">
          <input type="checkbox" checked={byReward} onChange={(e) => setByReward(e.target.checked)} disabled={!!prompt} />
          Sort by reward
        </label>
        <label htmlFor="sample-prompt">Follow a prompt</label>
        <select id="sample-prompt" value={prompt} onChange={(e) => setPrompt(e.target.value)}>
          <option value="">— one step, all prompts —</option>
          {prompts.data?.data.map((p) => (
            <option key={p.prompt_hash} value={p.prompt_hash}>
              {p.prompt.slice(0, 80)} ({p.samples} samples, steps {p.first_step}–{p.last_step})
            </option>
          ))}
        </select>
        <ViewToggle view={view} onView={setView} disabled={!!prompt} />
      </form>
      <ErrorNote error={latest.error ?? prompts.error ?? atStep.error ?? acrossSteps.error ?? neighbours.error} />
      {prompt && acrossSteps.data && <FollowPrompt samples={acrossSteps.data.data} />}
      {!prompt && atStep.data && (
        // The step of the samples on screen: while the next step loads, the last one stays (marked busy).
        <div className="sample-groups" data-step={atStep.data.data[0]?.step ?? shownStep} aria-busy={atStep.isPlaceholderData}>
          {groups.length === 0 && <p className="muted">No samples at step {shownStep}.</p>}
          {tabled.length > 0 && <SampleTable groups={tabled} />}
          {carded.map((g) => (
            <SampleGroupView key={g.key} group={g} />
          ))}
        </div>
      )}
    </div>
  );
}
