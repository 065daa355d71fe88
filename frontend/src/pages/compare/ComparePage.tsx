import { Placeholder } from '../Placeholder';

export function ComparePage() {
  return <Placeholder title="Compare runs" />;
}
