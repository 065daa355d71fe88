// End-to-end check of the dashboard against a live `rlplane up`.
// env: RLPLANE_URL (serving the built dashboard at /), RLPLANE_TOKEN, SCREENSHOTS (dir),
//      RUN_ID (optional: a run training now; it gets cancelled, then a tiny run is submitted from
//      New run and must train on the freed worker), SAMPLES_RUN_ID (optional: a finished PPO
//      run: its reward and KL charts, and samples of the same prompts at several steps), CHROMIUM (browser binary).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = (process.env.RLPLANE_URL ?? '').replace(/\/$/, '');
const token = process.env.RLPLANE_TOKEN ?? '';
const shots = process.env.SCREENSHOTS ?? 'e2e/screenshots';
const runId = process.env.RUN_ID;
const samplesRunId = process.env.SAMPLES_RUN_ID;

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
  let newRunId;
  if (runId) {
    await step('submit a tiny run from New run', async () => {
      await page.getByRole('link', { name: 'New run', exact: true }).click();
      await page.waitForURL(/\/new$/);
      // The URL changes before the page does (the run page's spec tab has the same label): wait for the textarea.
      const editor = page.getByRole('textbox', { name: 'Run spec (YAML)' });
      await editor.waitFor();
      await page.waitForFunction(() => document.querySelector('textarea#spec-text')?.value.includes('algorithm:'), null, {
        timeout: 10_000,
      }).catch(() => {});
      const template = await editor.inputValue();
      if (!template.includes('algorithm: sft')) throw new Error('the editor did not open on the sft template');
      // First a mistake: the server's validation names the field and its line.
      await editor.fill(template.replace(/lr: [^\n#]+/, 'lr: -1 '));
      await page.locator('.spec-errors').filter({ hasText: 'train.lr' }).waitFor();
      await shot('07-new-run-invalid');
      const tiny = template
        .replace(/steps: \d+/, 'steps: 400')
        .replace(/checkpoint_every: \d+/, 'checkpoint_every: 200')
        .replace(/eval_every: \d+/, 'eval_every: 200')
        .replace(/name: [^\n]+/, 'name: e2e-from-new-run');
      await editor.fill(tiny);
      await page.getByTestId('spec-valid').waitFor();
      await shot('08-new-run-valid');
      await page.getByRole('button', { name: 'Submit run' }).click();
      await page.waitForURL(/\/runs\/\d+$/);
      newRunId = page.url().match(/\/runs\/(\d+)$/)[1];
    });

    await step('the submitted run trains and its chart gains points live', async () => {
      const chart = page.locator('[data-chart="train/loss"]');
      await chart.waitFor({ timeout: 120_000 });
      const count = async () => Number(await chart.getAttribute('data-points'));
      const first = await count();
      const url = page.url();
      const deadline = Date.now() + 90_000;
      while ((await count()) <= first) {
        if (Date.now() > deadline) throw new Error(`run ${newRunId}: train/loss stayed at ${first} points`);
        await page.waitForTimeout(300);
      }
      if (page.url() !== url) throw new Error('the page navigated while waiting for points');
      console.log(`    run ${newRunId} train/loss: ${first} -> ${await count()} points`);
      await shot('09-new-run-live');
    });

    await step('compare the two runs', async () => {
      await page.goto(`${base}/compare?runs=${runId},${newRunId}`);
      await page.locator('[data-chart="train/loss"][data-series="2"]').waitFor({ timeout: 30_000 });
      await shot('10-compare');
    });
  }

  if (samplesRunId) {
    await step('a PPO run shows reward and KL charts', async () => {
      await page.goto(`${base}/runs/${samplesRunId}`);
      for (const [panel, key] of [['Reward', 'reward/mean'], ['KL', 'ppo/kl'], ['KL', 'ppo/kl_coef']]) {
        const chart = page.getByRole('region', { name: panel, exact: true }).locator(`[data-chart="${key}"]`);
        await chart.waitFor({ timeout: 15_000 });
        await page.waitForFunction(
          (k) => Number(document.querySelector(`[data-chart="${k}"]`)?.getAttribute('data-points')) >= 4,
          key,
          { timeout: 15_000 },
        ).catch(() => {
          throw new Error(`${panel} panel: ${key} has fewer than 4 points`);
        });
      }
      await shot('11-ppo-charts');
    });

    await step('open a sample and follow its prompt across steps', async () => {
      await page.goto(`${base}/runs/${samplesRunId}/samples`);
      await page.locator('article.sample').first().waitFor();
      const first = await page.locator('article.sample').first().innerText();
      if (!/reward -?\d/.test(first) || !/kl -?\d/.test(first)) throw new Error(`a sample without reward and kl: ${first}`);
      await shot('12-samples-step');
      const select = page.getByLabel('Follow a prompt');
      const option = await select.locator('option').nth(1).getAttribute('value');
      await select.selectOption(option);
      const cards = page.locator('.side-by-side article.sample');
      await cards.nth(1).waitFor();
      if ((await cards.count()) < 2) throw new Error('expected the prompt\'s responses at several steps');
      await shot('13-samples-one-prompt');
    });
  }

  await step('workers page', async () => {
    await page.goto(`${base}/workers`);
    await page.locator('tr[data-worker]').first().waitFor();
    await shot('14-workers');
  });

  await step('admin: a token is shown once', async () => {
    await page.goto(`${base}/admin`);
    await page.getByLabel('Token name').fill('e2e-token');
    await page.getByRole('button', { name: 'Create token' }).click();
    const secret = page.getByTestId('new-token-secret');
    await secret.waitFor();
    if (!/^rlp_/.test(await secret.inputValue())) throw new Error('no token secret shown');
    await shot('15-admin-token');
  });

  if (pageErrors.length) fail(`uncaught errors in the page: ${pageErrors.join(' | ')}`);
  console.log(`e2e passed; screenshots in ${shots}`);
} finally {
  await browser.close();
}
