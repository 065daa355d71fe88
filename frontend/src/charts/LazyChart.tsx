import { useLayoutEffect, useRef, useState, type ComponentProps } from 'react';
import { MetricChart } from './MetricChart';
import { MetricTitle } from './MetricTitle';

// One observer for every chart on the page (a run can have thousands of keys). Charts within
// half a screen of the viewport are built, so a scroll usually finds them drawn.
const MARGIN = '50% 0px';
let observer: IntersectionObserver | null = null;
const waiting = new Map<Element, () => void>();

function observe(el: Element, onNear: () => void): () => void {
  if (typeof IntersectionObserver === 'undefined') {
    onNear(); // no observer (old browsers, jsdom): build at once
    return () => {};
  }
  observer ??= new IntersectionObserver(
    (entries) => {
      for (const entry of entries) {
        if (!entry.isIntersecting) continue;
        waiting.get(entry.target)?.();
        waiting.delete(entry.target);
        observer!.unobserve(entry.target);
      }
    },
    { rootMargin: MARGIN },
  );
  waiting.set(el, onNear);
  observer.observe(el);
  return () => {
    waiting.delete(el);
    observer?.unobserve(el);
  };
}

/**
 * A chart that is only built, and its history only fetched, once it comes near the viewport.
 * Until then a placeholder of the same size holds its place; once built it stays (with its zoom).
 */
export function LazyChart(props: ComponentProps<typeof MetricChart>) {
  const [near, setNear] = useState(false);
  const placeholder = useRef<HTMLElement>(null);
  const { source, metricKey } = props;
  useLayoutEffect(() => {
    const el = placeholder.current;
    if (near || !el) return;
    const show = () => {
      source.request(metricKey); // before the chart is built: its history is on the way meanwhile
      setNear(true);
    };
    // On the first screen, ask now rather than a frame later, when the observer would report it.
    if (el.getBoundingClientRect().top < window.innerHeight * 1.5) return show();
    return observe(el, show);
  }, [near, source, metricKey]);
  if (near) return <MetricChart {...props} />;
  return (
    <figure ref={placeholder} className="chart chart-pending" data-pending-chart={props.metricKey}>
      <figcaption>
        <MetricTitle metricKey={props.metricKey} decoding={props.decoding} />
        {props.actions}
      </figcaption>
      <div className="chart-canvas" style={{ height: (props.height ?? 200) + 32 }} />
    </figure>
  );
}
