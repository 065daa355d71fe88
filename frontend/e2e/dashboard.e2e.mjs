// End-to-end check of the dashboard against a live `rlplane up`.
// env: RLPLANE_URL (serving the built dashboard at /), RLPLANE_TOKEN, SCREENSHOTS (dir),
//      RUN_ID (optional: a run training now; it gets cancelled), CHROMIUM (browser binary).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = (process.env.RLPLANE_URL ?? '').replace(/\/$/, '');
const token = process.env.RLPLANE_TOKEN ?? '';
const shots = process.env.SCREENSHOTS ?? 'e2e/screenshots';
const runId = process.env.RUN_ID;

function fail(message) {
  console.error(`e2e FAILED: ${message}`);
  process.exit(1);
}
if (!base) fail('set RLPLANE_URL to the server serving the dashboard, e.g. http://127.0.0.1:8000');
if (!token) fail('set RLPLANE_TOKEN to an API token (e.g. the contents of $RLPLANE_HOME/admin.token)');
mkdirSync(shots, { recursive: true });

const step = async (name, fn) => {
  const started = Date.now();
  try {
    await fn();
  } catch (err) {
    await page?.screenshot({ path: join(shots, `FAILED-${name}.png`), fullPage: true }).catch(() => {});
    fail(`${name}: ${err?.message ?? err}`);
  }
  console.log(`ok  ${name} (${Date.now() - started} ms)`);
};
const shot = (name) => page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });

let page;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const pageErrors = [];
try {
  page = await (await browser.newContext({ viewport: { width: 1400, height: 900 } })).newPage();
  page.setDefaultTimeout(20_000);
  page.on('pageerror', (err) => pageErrors.push(err.message));

  await step('sign in', async () => {
    await page.goto(`${base}/runs`);
    await page.waitForURL(/\/signin\?next=%2Fruns/);
    await page.getByLabel('API token').fill(token);
    await shot('01-signin');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/runs$/);
    await page.getByTestId('user-name').filter({ hasText: /\S/ }).waitFor();
  });

  await step('runs list', async () => {
    await page.locator('table.runs').waitFor();
    if (runId) await page.locator(`tr[data-run-id="${runId}"]`).waitFor();
    await shot('02-runs');
  });

  if (!runId) {
    console.log('RUN_ID not set: skipping the live run checks');
  } else {
    await step('live chart gains points without reload', async () => {
      await page.goto(`${base}/runs/${runId}`);
      const chart = page.locator('[data-chart="train/loss"]');
      await chart.waitFor({ timeout: 60_000 });
      const count = async () => Number(await chart.getAttribute('data-points'));
      const before = await count();
      const navigations = [];
      page.on('framenavigated', (f) => f === page.mainFrame() && navigations.push(f.url()));
      const deadline = Date.now() + 60_000;
      while ((await count()) <= before) {
        if (Date.now() > deadline) throw new Error(`train/loss stayed at ${before} points for 60 s; is run ${runId} training?`);
        await page.waitForTimeout(500);
      }
      if (navigations.length) throw new Error(`the page reloaded/navigated: ${navigations.join(', ')}`);
      console.log(`    train/loss: ${before} -> ${await count()} points`);
      await shot('03-run-charts');
    });

    await step('logs tab shows lines', async () => {
      await page.getByRole('link', { name: 'Logs', exact: true }).click();
      await page.waitForURL(new RegExp(`/runs/${runId}/logs$`));
      await page.locator('.log-line').first().waitFor({ timeout: 30_000 });
      await shot('04-run-logs');
    });

    await step('spec tab shows the YAML', async () => {
      await page.getByRole('link', { name: 'Spec', exact: true }).click();
      await page.waitForURL(new RegExp(`/runs/${runId}/spec$`));
      await page.locator('pre.spec').filter({ hasText: 'algorithm:' }).waitFor();
      await shot('05-run-spec');
    });

    await step('cancel from the UI', async () => {
      await page.getByRole('button', { name: 'Cancel' }).click();
      const badge = page.locator('.run-title .badge');
      await page.waitForFunction(
        () => document.querySelector('.run-title .badge')?.getAttribute('data-status') === 'cancelled',
        null,
        { timeout: 90_000, polling: 250 },
      ).catch(async () => {
        throw new Error(`status is ${await badge.getAttribute('data-status')}, expected cancelled within 90 s`);
      });
      await shot('06-run-cancelled');
    });
  }
  if (pageErrors.length) fail(`uncaught errors in the page: ${pageErrors.join(' | ')}`);
  console.log(`e2e passed; screenshots in ${shots}`);
} finally {
  await browser.close();
}
