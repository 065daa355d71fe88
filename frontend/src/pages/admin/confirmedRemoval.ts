import { useState } from 'react';

/** The item a removal waits on the user's confirmation for (a dialog shows while one is set). A failed removal keeps
 * the dialog open with its error; cancelling clears the error too. */
export function useConfirmedRemoval(remove: { mutateAsync: (item: string) => Promise<unknown>; reset: () => void }) {
  const [confirming, setConfirming] = useState<string | null>(null);
  const confirm = async () => {
    if (!confirming) return;
    try {
      await remove.mutateAsync(confirming);
      setConfirming(null);
    } catch {
      // shown inside the dialog
    }
  };
  const cancel = () => {
    setConfirming(null);
    remove.reset();
  };
  return { confirming, ask: setConfirming, confirm, cancel };
}
