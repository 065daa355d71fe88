/** Run colours by position in the comparison; defined for both themes in styles.css (Usage draws its keys in them too). */
export const PALETTE_SIZE = 8;
export const runColor = (index: number) => `var(--series-${index % PALETTE_SIZE})`;
