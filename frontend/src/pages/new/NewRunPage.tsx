import { Placeholder } from '../Placeholder';

export function NewRunPage() {
  return <Placeholder title="New run" />;
}
