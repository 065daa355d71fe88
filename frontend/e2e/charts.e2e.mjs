// End-to-end check of the charts against a live `rlplane up` (tests/test_dashboard.py runs it):
// what must be seen in a real browser. It fills its own runs through the ingest API, with a worker
// token it creates, on a queue no worker serves.
// env: RLPLANE_URL, RLPLANE_TOKEN (an admin token), SCREENSHOTS (dir), CHROMIUM (browser binary);
//      FILL_ONLY=1 fills the runs, prints their ids and stops (to look by hand).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launchChromium, stepsOf } from './browser.mjs';

const base = (process.env.RLPLANE_URL ?? '').replace(/\/$/, '');
const token = process.env.RLPLANE_TOKEN ?? '';
const shots = process.env.SCREENSHOTS ?? 'e2e/screenshots';
const fail = (message) => {
  console.error(`charts e2e FAILED: ${message}`);
  process.exit(1);
};
if (!base || !token) fail('set RLPLANE_URL and RLPLANE_TOKEN (an admin token)');
mkdirSync(shots, { recursive: true });

// ---- the runs -------------------------------------------------------------------------------

async function call(method, path, tok, body) {
  const res = await fetch(`${base}/api/v1${path}`, {
    method,
    headers: { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

let writer;
const leased = [];
// The API calls a run lost after 20 s without its worker's heartbeat; the live-point check comes later.
setInterval(() => {
  for (const id of leased) {
    const beat = { name: `e2e-charts-${id}`, queues: ['e2e-charts-no-worker'], current_run_id: id };
    call('POST', '/workers/heartbeat', writer, beat).catch((err) => console.error(`heartbeat: ${err.message}`));
  }
}, 5000).unref();

async function leasedRun(name) {
  const spec = {
    name, algorithm: 'sft', model: { path: 'builtin:tiny-gpt2', max_seq_len: 32 }, data: { source: 'builtin:arithmetic' },
    train: { steps: 100000, batch_size: 4 }, resources: { queue: 'e2e-charts-no-worker' },
  };
  const { id } = await call('POST', '/runs', token, spec);
  await call('POST', `/runs/${id}/lease`, writer, { worker: `e2e-charts-${id}` });
  leased.push(id);
  return id;
}

const NaN_ = 'NaN';
const noise = (s) => Math.sin(s * 12.9898) * 0.5 + Math.sin(s * 78.233) * 0.3; // deterministic wiggle
async function ingest(runId, series) {
  const points = [];
  for (const [key, steps, value] of series) for (const s of steps) points.push({ key, step: s, value: value(s), time: 1.7e9 + s });
  for (let i = 0; i < points.length; i += 10_000) await call('POST', `/runs/${runId}/metrics`, writer, points.slice(i, i + 10_000));
}
const range = (from, to, every = 1) => Array.from({ length: Math.floor((to - from) / every) + 1 }, (_, i) => from + i * every);
const EVAL = { 0: 4.1, 250: 0.595, 500: 0.52, 750: 0.47, 1000: 0.45 };
const lr = (s) => (s <= 5 ? 1e-3 * (s / 5) : 1e-3 * 0.5 * (1 + Math.cos((Math.PI * (s - 5)) / 995)));
const reward = (s) => 0.2 + s / 2000 + 0.05 * noise(s);

async function fillRuns() {
  const user = `e2e-charts-writer-${Date.now()}`; // a second run of the script against the same server gets its own
  await call('POST', '/users', token, { name: user });
  writer = (await call('POST', '/tokens', token, { name: 'e2e-charts', scopes: ['worker'], user })).token;
  const main = await leasedRun('e2e-charts');
  const steps = range(1, 1000);
  await ingest(main, [
    ['train/loss', steps, (s) => 2 * Math.exp(-s / 300) + 0.1 * noise(s)],
    ['eval/loss', range(0, 1000, 250), (s) => EVAL[s]],
    ['train/lr', range(0, 1000), lr],
    ['reward/mean', steps, reward],
    ['reward/arithmetic', steps, reward],
    ['reward/std', steps, (s) => 0.1 + 0.01 * noise(s)],
    ['eval/accuracy', range(250, 1000, 250), (s) => s / 2000],
    ['eval/reward/arithmetic', range(250, 1000, 250), (s) => s / 2000],
    ...['clipfrac', 'approx_kl', 'entropy', 'value_clipfrac'].map((k, i) => [`ppo/${k}`, steps, (s) => 0.1 * i + 0.02 * noise(s + i)]),
    ['ppo/kl', steps, (s) => 0.01 * s ** 0.5],
    ['diverge/loss', steps, (s) => (s >= 300 ? NaN_ : 1 + noise(s))],
    ['allnan/metric', steps, () => NaN_],
    ['tiny/negative', steps, (s) => -1e-5 - 1e-5 * Math.abs(noise(s))],
    ['huge/value', steps, (s) => 1e30 * (1 + Math.abs(noise(s)))],
    ['const/zero', steps, () => 0],
    ['short/metric', [1, 2, 3], (s) => s * 0.1],
    ['big/downsampled', range(0, 5999), (s) => (s % 1000 === 500 ? 50 : Math.sin(s / 300))],
  ]);
  const other = await leasedRun('e2e-charts-other');
  await ingest(other, [
    ['train/loss', range(2, 1000, 2), (s) => 1.8 * Math.exp(-s / 250) + 0.1 * noise(s + 7)],
    ['eval/loss', range(0, 1000, 250), (s) => EVAL[s] * 1.1],
  ]);
  const many = await leasedRun('e2e-charts-300-keys');
  const keys = ['reward/mean', ...range(0, 298).map((i) => `layers/${String(i).padStart(3, '0')}/grad_norm`)];
  await ingest(many, keys.map((k, i) => [k, range(1, 100), (s) => i + Math.sin(s / 10)]));
  return { main, other, many };
}

// ---- the browser ----------------------------------------------------------------------------

const runs = await fillRuns();
console.log(`charts runs: ${JSON.stringify(runs)}`);
if (process.env.FILL_ONLY) process.exit(0);

let page;
const { step, shot } = stepsOf({ shots, currentPage: () => page, fail, prefix: 'charts-' });
const check = (ok, message) => {
  if (!ok) throw new Error(message);
};
const chart = (key) => page.locator(`[data-chart="${key}"]`);
const attr = (key, name) => chart(key).getAttribute(`data-${name}`);
const drawn = (key) =>
  page.waitForFunction((k) => document.querySelector(`[data-chart="${k}"]`)?.dataset.lastStep, key, { timeout: 20_000 });
// A placeholder turns into its chart as it scrolls into view: scroll by selector, in the page.
const scrollTo = async (key) => {
  const sel = `[data-chart="${key}"], [data-pending-chart="${key}"]`;
  await page.locator(sel).first().waitFor();
  await page.evaluate((s) => document.querySelector(s)?.closest('figure')?.scrollIntoView({ block: 'center' }), sel);
};
const open = async (key) => {
  await scrollTo(key);
  await drawn(key);
  await scrollTo(key);
};

/** Hovers a chart at an x value (nudging to land on it) and reads the legend: the x and series `row`. */
async function legendAt(key, x, row = 1) {
  const box = await chart(key).locator('.u-over').boundingBox();
  const [min, max] = (await attr(key, 'x-range')).split(',').map(Number);
  const rows = chart(key).locator('.u-legend .u-series');
  let px = box.x + ((x - min) / (max - min)) * box.width;
  for (let i = 0; i < 8; i++) {
    await page.mouse.move(px, box.y + box.height / 2);
    const at = Number((await rows.nth(0).locator('.u-value').innerText()).replace(/,/g, ''));
    if (at === x) break;
    px += at < x ? 0.5 : -0.5;
  }
  return [await rows.nth(0).locator('.u-value').innerText(), await rows.nth(row).locator('.u-value').innerText()];
}

/** Drags across a chart from x0 to x1, as a user zooms. */
async function dragZoom(key, x0, x1) {
  const box = await chart(key).locator('.u-over').boundingBox();
  const [min, max] = (await attr(key, 'x-range')).split(',').map(Number);
  const px = (x) => box.x + ((x - min) / (max - min)) * box.width;
  await page.mouse.move(px(x0), box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(px(x1), box.y + box.height / 2, { steps: 5 });
  await page.mouse.up();
}

/** The canvas colour at a fraction of the plot area: what is painted there. */
const pixel = (key, fx, fy) =>
  chart(key).evaluate((el, [fx, fy]) => {
    const over = el.querySelector('.u-over').getBoundingClientRect();
    const canvas = el.querySelector('canvas');
    const box = canvas.getBoundingClientRect();
    const ratio = canvas.width / box.width;
    const x = (over.left - box.left + fx * over.width) * ratio;
    const y = (over.top - box.top + fy * over.height) * ratio;
    return [...canvas.getContext('2d').getImageData(Math.round(x), Math.round(y), 1, 1).data];
  }, [fx, fy]);

/** How many canvas pixels are painted in the theme's --chart-line colour: the line follows the theme. */
const lineColour = (key) =>
  chart(key).evaluate((el) => {
    const css = getComputedStyle(document.documentElement).getPropertyValue('--chart-line').trim();
    const n = parseInt(css.slice(1), 16);
    const [r, g, b] = [n >> 16, (n >> 8) & 255, n & 255];
    const canvas = el.querySelector('canvas');
    const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
    let pixels = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i + 3] > 200 && Math.abs(data[i] - r) + Math.abs(data[i + 1] - g) + Math.abs(data[i + 2] - b) < 30) pixels++;
    }
    return { theme: document.documentElement.dataset.theme, pixels };
  });

const textWidth = (text) =>
  page.evaluate((t) => {
    const ctx = document.createElement('canvas').getContext('2d');
    ctx.font = '12px system-ui, -apple-system, "Segoe UI", sans-serif';
    return ctx.measureText(t).width;
  }, text);

const browser = await launchChromium();
const pageErrors = [];
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await context.addInitScript((t) => localStorage.setItem('rlplane.token', t), token);
  page = await context.newPage();
  page.setDefaultTimeout(20_000);
  page.on('pageerror', (err) => pageErrors.push(err.message));
  const historyRequests = [];
  const dropped = [];
  page.on('request', (r) => /\/metrics\/columns\?/.test(r.url()) && historyRequests.push(r.url()));
  page.on('requestfailed', (r) => /\/metrics\?max_points/.test(r.url()) && dropped.push(r.url()));

  await step('sparse series are drawn raw: eval/loss reads 0.595 at step 250, the lr peak stays at step 5', async () => {
    await page.goto(`${base}/runs/${runs.main}`);
    await open('eval/loss');
    check((await attr('eval/loss', 'smoothing')) === '0', 'eval/loss is smoothed');
    const [x, value] = await legendAt('eval/loss', 250);
    check(x === '250' && value === '0.595', `eval/loss at step ${x} reads ${value}, expected 0.595 at 250`);
    await open('train/lr');
    check((await attr('train/lr', 'smoothing')) === '0', 'train/lr is smoothed');
    await dragZoom('train/lr', 0, 25); // a step is under a pixel wide at full range
    const [at, peak] = await legendAt('train/lr', 5);
    check(at === '5' && peak === '0.001', `train/lr at step ${at} reads ${peak}, expected the peak 0.001 at 5`);
    const [after, lower] = await legendAt('train/lr', 11);
    check(after === '11' && Number(lower) < 0.001, `train/lr at step ${after} reads ${lower}: the peak moved`);
    await open('train/loss');
    check((await attr('train/loss', 'smoothing')) === '0.6', 'train/loss (dense) is not smoothed by default');
    const labels = await chart('train/loss').locator('.u-legend .u-series .u-label').allInnerTexts();
    check(labels.join(',') === 'step,value,smoothed', `train/loss legend: ${labels}`);
    await shot('sparse-raw');
  });

  await step('NaN and infinity are marked, with "NaN from step N"', async () => {
    await open('diverge/loss');
    const note = chart('diverge/loss').locator('xpath=..').getByRole('note');
    check((await note.innerText()) === 'NaN from step 300', `diverge/loss note: ${await note.innerText()}`);
    const [r, g, b] = await pixel('diverge/loss', 0.9, 0.5);
    check(r > g + 20 && r > b + 20, `no NaN band right of step 300 (pixel ${r},${g},${b})`);
    await open('allnan/metric');
    check((await attr('allnan/metric', 'nonfinite')) === 'NaN from step 1', 'an all-NaN series says nothing');
    await chart('diverge/loss').scrollIntoViewIfNeeded();
    await shot('nan');
  });

  await step('tick labels: minus signs, short huge labels that fit, no 0..100 for zero, whole steps', async () => {
    for (const key of ['tiny/negative', 'huge/value']) {
      await open(key);
      const ticks = (await attr(key, 'y-ticks')).split('|').filter(Boolean);
      const axis = Number(await attr(key, 'y-axis-px'));
      const widest = Math.max(...(await Promise.all(ticks.map(textWidth))));
      check(widest + 15 <= axis, `${key}: labels ${ticks} (${widest}px) do not fit the ${axis}px axis`);
      if (key === 'tiny/negative') check(ticks.every((t) => t.startsWith('-') || t === '0'), `lost minus: ${ticks}`);
      if (key === 'huge/value') check(ticks.every((t) => /^\d+(\.\d+)?e30$/.test(t)), `huge labels: ${ticks}`);
    }
    await open('const/zero');
    const zero = (await attr('const/zero', 'y-ticks')).split('|');
    check(!zero.includes('100') && zero.includes('0') && zero.some((t) => t.startsWith('-')), `const/zero axis: ${zero}`);
    await open('short/metric');
    const steps = (await attr('short/metric', 'x-ticks')).split('|').filter(Boolean);
    check(steps.length > 0 && steps.every((t) => /^\d+$/.test(t)), `short run step ticks: ${steps}`);
    await shot('ticks');
  });

  await step('panels: RL health (clipping & ratio, entropy), identical series drawn once, full width, min/max band', async () => {
    await page.goto(`${base}/runs/${runs.main}`);
    for (const [panel, k] of [['Clipping & ratio', 'ppo/clipfrac'], ['Clipping & ratio', 'ppo/approx_kl'],
      ['Clipping & ratio', 'ppo/value_clipfrac'], ['Entropy & length', 'ppo/entropy']]) {
      await page.getByRole('region', { name: panel, exact: true }).locator(`[data-chart="${k}"], [data-pending-chart="${k}"]`).waitFor();
    }
    check((await page.getByRole('region', { name: 'Other', exact: true }).locator('[data-chart^="ppo/"]').count()) === 0, 'ppo key in Other');
    await page.locator('[data-chart="reward/mean"]').locator('xpath=..').getByText('= reward/arithmetic (same values)').waitFor();
    check((await page.locator('[data-chart="reward/arithmetic"], [data-pending-chart="reward/arithmetic"]').count()) === 0, 'reward/arithmetic drawn twice');
    await scrollTo('eval/accuracy');
    await page.locator('[data-chart="eval/accuracy"]').locator('xpath=..').getByText('= eval/reward/arithmetic (same values)').waitFor();
    await open('train/lr'); // alone in its panel: it takes the page's width
    const lrBox = await chart('train/lr').boundingBox();
    const tab = await page.locator('.charts-tab').boundingBox();
    check(lrBox.width > 0.9 * tab.width, `train/lr is ${lrBox.width}px of ${tab.width}px`);
    await open('big/downsampled');
    check((await attr('big/downsampled', 'bands')) === '1', 'no min/max band on a downsampled series');
    const labels = await chart('big/downsampled').locator('.u-legend .u-series .u-label').allInnerTexts();
    check(labels.includes('max') && labels.includes('min'), `band legend: ${labels}`);
    await shot('panels');
  });

  await step('a live point keeps the drag-zoom; the theme toggle recolours without losing it', async () => {
    await page.goto(`${base}/runs/${runs.main}`);
    await open('train/loss');
    await dragZoom('train/loss', 300, 600);
    const zoomed = await attr('train/loss', 'x-range');
    check((await attr('train/loss', 'zoomed')) === 'true' && zoomed !== '1,1000', `no zoom: ${zoomed}`);
    const before = Number(await attr('train/loss', 'points'));
    await ingest(runs.main, [['train/loss', range(1001, 1010), (s) => 0.2 + 0.01 * noise(s)]]);
    await page.waitForFunction(([k, n]) => Number(document.querySelector(`[data-chart="${k}"]`)?.dataset.points) > n, ['train/loss', before]);
    await page.waitForTimeout(300);
    check((await attr('train/loss', 'x-range')) === zoomed, `a live point reset the zoom: ${zoomed} -> ${await attr('train/loss', 'x-range')}`);
    const theme = await page.evaluate(() => document.documentElement.dataset.theme);
    const first = await lineColour('train/loss');
    check(first.pixels > 50, 'the line is not in the theme colour to begin with');
    await page.getByRole('button', { name: /Switch to .* theme/ }).click();
    await page.waitForFunction(([k, t]) => document.querySelector(`[data-chart="${k}"]`)?.dataset.theme !== t, ['train/loss', theme]);
    check((await attr('train/loss', 'x-range')) === zoomed, 'the theme toggle reset the zoom');
    const switched = await lineColour('train/loss');
    check(switched.theme !== first.theme && switched.pixels > 50, `the line is not drawn in the new theme's colour (${JSON.stringify(switched)})`);
    await shot('zoom-dark');
    await page.getByRole('button', { name: /Switch to .* theme/ }).click();
    await chart('train/loss').locator('.u-over').dblclick();
    check((await attr('train/loss', 'x-range')) !== zoomed, 'double-click did not zoom out');
  });

  await step('Compare draws raw and smoothed lines per run, sparse keys raw, with the same chart', async () => {
    await page.goto(`${base}/compare?runs=${runs.main},${runs.other}`);
    await open('train/loss');
    await page.waitForFunction(() => document.querySelector('[data-chart="train/loss"]')?.dataset.series === '2');
    const labels = await chart('train/loss').locator('.u-legend .u-series .u-label').allInnerTexts();
    check(labels.filter((l) => l.endsWith(' smoothed')).length === 2 && labels.length === 5, `compare legend: ${labels}`);
    await open('eval/loss');
    const evalLabels = await chart('eval/loss').locator('.u-legend .u-series .u-label').allInnerTexts();
    check(!evalLabels.some((l) => l.endsWith('smoothed')), `eval/loss smoothed in Compare: ${evalLabels}`);
    await shot('compare');
  });

  await step('300 keys: only charts near the screen are fetched; search, pins and folding groups', async () => {
    historyRequests.length = 0;
    dropped.length = 0;
    await page.goto(`${base}/runs/${runs.many}`);
    await drawn('reward/mean');
    await page.waitForTimeout(500);
    const fetched = (urls) => new Set(urls.flatMap((u) => new URL(u).searchParams.getAll('keys')));
    const first = fetched(historyRequests).size;
    check(first > 0 && first < 60, `${first} keys fetched on opening (of 300)`);
    check(dropped.length === 1, "index.html's early request for every key was not dropped");
    check((await page.locator('[data-chart]').count()) < 60, 'every chart was built at once');
    await page.getByLabel('Search keys').fill('layers/29');
    await drawn('layers/290/grad_norm');
    check((await page.locator('[data-chart], [data-pending-chart]').count()) === 9, 'search did not narrow to layers/29x');
    await page.getByRole('button', { name: 'Pin layers/297/grad_norm' }).click();
    await page.getByLabel('Search keys').fill('');
    const pinned = page.getByRole('region', { name: 'Pinned', exact: true });
    await pinned.locator('[data-chart="layers/297/grad_norm"]').waitFor();
    await page.reload();
    await page.getByRole('region', { name: 'Pinned', exact: true }).locator('[data-chart="layers/297/grad_norm"]').waitFor();
    const group = page.getByRole('region', { name: 'Gradient norm', exact: true });
    await group.getByRole('button', { name: /Gradient norm/ }).click();
    check((await group.locator('[data-chart], [data-pending-chart]').count()) === 0, 'the group did not fold');
    await group.getByRole('button', { name: /Gradient norm/ }).click();
    await shot('many-keys');
  });

  if (pageErrors.length) fail(`uncaught errors in the page: ${pageErrors.join(' | ')}`);
  console.log(`charts e2e passed; screenshots in ${shots}`);
} finally {
  await browser.close();
}
