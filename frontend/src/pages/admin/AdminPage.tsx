import { Placeholder } from '../Placeholder';

export function AdminPage() {
  return <Placeholder title="Admin" />;
}
