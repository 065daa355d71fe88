// The spec's named priorities (rlplane/spec/sections.py, PRIORITIES)
const PRIORITY_NAMES: Record<number, string> = { 25: 'low', 50: 'normal', 75: 'high', 100: 'urgent' };

/** 75 -> "75 (high)", as a spec may name it; a number between the names stays a number. */
export function priorityName(priority: number): string {
  const name = PRIORITY_NAMES[priority];
  return name ? `${priority} (${name})` : String(priority);
}
