interface Props {
  step: number | null;
  previous: number | null;
  next: number | null;
  latest: number | null;
  disabled: boolean;
  onStep: (step: number | null) => void;
}

/** The step to show: typed, or the previous / next step that has samples; Latest follows new ones. */
export function StepPicker({ step, previous, next, latest, disabled, onStep }: Props) {
  return (
    <div className="step-picker" role="group" aria-label="Choose a step">
      <button type="button" disabled={disabled || previous == null} onClick={() => previous != null && onStep(previous)}>
        ‹ Previous{previous != null ? ` (${previous})` : ''}
      </button>
      <label htmlFor="sample-step">Step</label>
      <input
        id="sample-step"
        type="number"
        min={0}
        value={step ?? ''}
        disabled={disabled}
        onChange={(e) => onStep(e.target.value === '' ? null : Number(e.target.value))}
      />
      <button type="button" disabled={disabled || next == null} onClick={() => next != null && onStep(next)}>
        Next{next != null ? ` (${next})` : ''} ›
      </button>
      <button type="button" disabled={disabled || latest == null || step === latest} onClick={() => onStep(null)}>
        Latest{latest != null ? ` (${latest})` : ''}
      </button>
    </div>
  );
}
