import { useRef } from 'react';

/** The previous array while its items are the same objects, so memos keyed on it hold. */
export function useShallowStable<T>(items: readonly T[]): readonly T[] {
  const ref = useRef(items);
  const prev = ref.current;
  if (prev.length !== items.length || prev.some((item, i) => item !== items[i])) ref.current = items;
  return ref.current;
}
