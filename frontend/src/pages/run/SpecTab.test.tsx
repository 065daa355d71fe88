import { describe, expect, it, vi } from 'vitest';
import { fireEvent, screen, waitFor } from '@testing-library/react';
import { runDetail } from '../../test/fixtures';
import { renderTab } from '../../test/renderTab';
import { SpecTab } from './SpecTab';

describe('SpecTab', () => {
  it('shows the spec as submitted, comments kept, and copies that text', async () => {
    const writeText = vi.fn(async () => {});
    Object.defineProperty(navigator, 'clipboard', { value: { writeText }, configurable: true });
    const run = runDetail();
    renderTab(<SpecTab />, run);
    const pre = screen.getByLabelText('Run spec (YAML)');
    expect(pre.textContent).toBe(run.spec_text);
    expect(pre.textContent).not.toContain('dpo: null');
    fireEvent.click(screen.getByRole('button', { name: 'Copy' }));
    await waitFor(() => expect(screen.getByText('Copied')).toBeTruthy());
    expect(writeText).toHaveBeenCalledWith(run.spec_text);
  });

  it('shows a spec sent as JSON as YAML, and the stored spec of an old run', () => {
    const { unmount } = renderTab(<SpecTab />, runDetail({ spec_text: '{"name": "base", "train": {"lr": 0.1}}' }));
    expect(screen.getByLabelText('Run spec (YAML)').textContent).toBe('name: base\ntrain:\n  lr: 0.1\n');
    unmount();
    renderTab(<SpecTab />, runDetail({ spec_text: null }));
    expect(screen.getByLabelText('Run spec (YAML)').textContent).toContain('dpo: null');
    expect(screen.getByTestId('spec-origin').textContent).toContain('before specs were kept');
  });
});
