// The browser half of bench/dashboard.py: real Chromium (playwright-core from frontend/node_modules).
//   open URL TOKEN RUN_ID KEY REPEATS  -> {"open_ms": [...]}: a fresh browser context loads /runs/RUN_ID
//                                         until KEY's chart has drawn its points (cold cache each time)
//   live URL TOKEN RUN_ID KEY SECONDS  -> {"drawn": [[epoch_ms, step], ...]}: when each new last step of
//                                         KEY's chart reached the canvas, watched for SECONDS
//   paint URL TOKEN PATH SELECTOR REPEATS -> {"open_ms": [...], "timeline": {...}}: a fresh context opens PATH
//                                         until SELECTOR is there (for a chart: until it has drawn), cold cache
//                                         each time; the timeline: the last open's resources, when each came
//   watch URL TOKEN PATH SELECTOR SECONDS -> {"requests": [[ms, method, path], ...], "last_step": N}: PATH opened
//                                         until SELECTOR, then every API request the page makes for SECONDS
import { createRequire } from 'node:module';

const require = createRequire(new URL('../frontend/package.json', import.meta.url));
const { chromium } = require('playwright-core');

const [mode, base, token, runId, key, amount] = process.argv.slice(2);
if (!['open', 'live', 'paint', 'watch'].includes(mode) || !amount) {
  console.error('usage: node bench/dashboard_browser.mjs open|live URL TOKEN RUN_ID KEY REPEATS|SECONDS');
  console.error('       node bench/dashboard_browser.mjs paint|watch URL TOKEN PATH SELECTOR REPEATS|SECONDS');
  process.exit(2);
}
const chart = `[data-chart="${key}"]`;
// paint and watch: runId is a path, key a selector; a chart counts once it has drawn (data-last-step set).
const painted = (page, selector) =>
  page.waitForFunction(
    (sel) => {
      const el = document.querySelector(sel);
      return el && (!el.matches('[data-chart]') || el.dataset.lastStep);
    },
    selector,
    { polling: 'raf' },
  );

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-renderer-backgrounding'],
});

async function signedInPage() {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await context.addInitScript((t) => localStorage.setItem('rlplane.token', t), token);
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  return { context, page };
}

// Resolves once the chart carries a drawn last step (set one frame after uPlot's setData).
const drawn = (page) => page.waitForFunction((sel) => document.querySelector(sel)?.dataset.lastStep, chart, { polling: 'raf' });

try {
  if (mode === 'open') {
    const times = [];
    for (let i = 0; i < Number(amount); i++) {
      const { context, page } = await signedInPage();
      const started = Date.now();
      await page.goto(`${base}/runs/${runId}`);
      await drawn(page);
      times.push(Date.now() - started);
      const points = await page.locator(chart).getAttribute('data-points');
      if (!(Number(points) > 0)) throw new Error(`chart ${key} drew no points`);
      await context.close();
    }
    console.log(JSON.stringify({ open_ms: times }));
  } else if (mode === 'paint') {
    const times = [];
    let timeline = null;
    for (let i = 0; i < Number(amount); i++) {
      const { context, page } = await signedInPage();
      const started = Date.now();
      await page.goto(`${base}${runId}`);
      await painted(page, key);
      times.push(Date.now() - started);
      // where the last open's time went: each resource's start and end (ms from navigation) and size
      timeline = await page.evaluate(() => ({
        painted_ms: Math.round(performance.now()),
        dom_content_loaded_ms: Math.round(performance.getEntriesByType('navigation')[0]?.domContentLoadedEventEnd ?? -1),
        resources: performance.getEntriesByType('resource').map((e) => [
          e.name.replace(location.origin, '').slice(0, 80), Math.round(e.startTime), Math.round(e.responseEnd), e.encodedBodySize,
        ]),
      }));
      await context.close();
    }
    console.log(JSON.stringify({ open_ms: times, timeline }));
  } else if (mode === 'watch') {
    const { page } = await signedInPage();
    await page.goto(`${base}${runId}`);
    await painted(page, key);
    const started = Date.now();
    const requests = [];
    page.on('request', (r) => {
      const url = new URL(r.url());
      if (url.pathname.startsWith('/api/')) requests.push([Date.now() - started, r.method(), url.pathname + url.search]);
    });
    await page.waitForTimeout(Number(amount) * 1000);
    const lastStep = await page.evaluate((sel) => Number(document.querySelector(sel)?.dataset.lastStep ?? -1), key);
    console.log(JSON.stringify({ requests, last_step: lastStep }));
  } else {
    const { page } = await signedInPage();
    await page.goto(`${base}/runs/${runId}`);
    await drawn(page);
    await page.evaluate((sel) => {
      const el = document.querySelector(sel);
      const seen = (window.__drawn = [[Date.now(), Number(el.dataset.lastStep)]]);
      new MutationObserver(() => seen.push([Date.now(), Number(el.dataset.lastStep)])).observe(el, {
        attributes: true,
        attributeFilter: ['data-last-step'],
      });
    }, chart);
    await page.waitForTimeout(Number(amount) * 1000);
    console.log(JSON.stringify({ drawn: await page.evaluate(() => window.__drawn) }));
  }
} finally {
  await browser.close();
}
