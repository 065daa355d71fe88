import { useSearchParams } from 'react-router';

/** Routes that later slices fill in; they exist now so links and shared URLs resolve. */
export function Placeholder({ title }: { title: string }) {
  const [params] = useSearchParams();
  const query = params.toString();
  return (
    <section>
      <h1>{title}</h1>
      <p>This page is not built yet.</p>
      {query && (
        <p>
          Requested with <code>{decodeURIComponent(query)}</code>
        </p>
      )}
    </section>
  );
}
