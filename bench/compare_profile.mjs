// A CPU profile of one Compare open in Chromium (a development aid beside bench/dashboard.py, not a benchmark):
//   node bench/compare_profile.mjs URL TOKEN PATH SELECTOR -> the functions that took the most of the main thread
//   until SELECTOR had drawn, self time, and the open's milliseconds.
import { createRequire } from 'node:module';

const require = createRequire(new URL('../frontend/package.json', import.meta.url));
const { chromium } = require('playwright-core');
const [base, token, path, selector] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await context.addInitScript((t) => localStorage.setItem('rlplane.token', t), token);
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 200 });
  await cdp.send('Profiler.start');
  const started = Date.now();
  await page.goto(`${base}${path}`);
  await page.waitForFunction((sel) => document.querySelector(sel)?.dataset.lastStep, selector, { polling: 'raf' });
  const openMs = Date.now() - started;
  const pageNow = await page.evaluate(() => performance.now());
  const { profile } = await cdp.send('Profiler.stop');
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const scriptName = (id) => {
    const f = byId.get(id).callFrame;
    return `${f.functionName || '(anonymous)'} ${f.url.split('/').pop()}:${f.lineNumber}`;
  };
  const dt = new Map(profile.nodes.map((n) => [n.id, 0]));
  profile.samples.forEach((id, i) => dt.set(id, dt.get(id) + (profile.timeDeltas[i] ?? 0)));
  const self = new Map();
  for (const n of profile.nodes) {
    const f = n.callFrame;
    const name = `${f.functionName || '(anonymous)'} ${f.url.split('/').pop()}:${f.lineNumber}`;
    self.set(name, (self.get(name) ?? 0) + dt.get(n.id) / 1000);
  }
  const top = [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, 15);
  // the main thread in 50 ms windows from navigation: idle, (program) (the engine's own work: parsing, style,
  // layout), garbage collection, and script
  const kind = new Map(profile.nodes.map((n) => [n.id, ['(idle)', '(program)', '(garbage collector)'].includes(n.callFrame.functionName) ? n.callFrame.functionName : 'script']));
  // the profile's clock against the page's: its end is (about) when the page said performance.now()
  const offset = pageNow * 1000 - profile.endTime;
  const windows = {};
  let at = profile.startTime;
  profile.samples.forEach((id, i) => {
    at += profile.timeDeltas[i] ?? 0;
    const w = Math.floor((at + offset) / 50000) * 50;
    if (w < 0) return;
    windows[w] ??= {};
    const name = kind.get(id) === 'script' ? scriptName(id) : kind.get(id);
    windows[w][name] = Math.round(((windows[w][name] ?? 0) + (profile.timeDeltas[i + 1] ?? 0) / 1000) * 10) / 10;
  });
  const resources = await page.evaluate(() =>
    performance.getEntriesByType('resource').map((e) => [e.name.replace(location.origin, '').slice(0, 40), Math.round(e.startTime), Math.round(e.responseEnd)]),
  );
  console.log(JSON.stringify({ open_ms: openMs, resources, windows, top: top.map(([k, v]) => [k, Math.round(v)]) }));
} finally {
  await browser.close();
}
