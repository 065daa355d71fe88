import { Placeholder } from '../Placeholder';

export function WorkersPage() {
  return <Placeholder title="Workers" />;
}
