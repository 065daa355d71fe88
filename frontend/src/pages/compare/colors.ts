/** Run colours by position in the comparison; defined for both themes in compare.css. */
export const PALETTE_SIZE = 8;
export const runColor = (index: number) => `var(--series-${index % PALETTE_SIZE})`;
