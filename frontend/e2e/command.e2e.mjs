// End-to-end check of users' scripts' runs (algorithm: command) in the dashboard: TRL runs a worker ran under the
// SDK's Hugging Face callback must show their loss and reward charts, their completion groups and their code.
// env: RLPLANE_URL (serving the built dashboard), RLPLANE_TOKEN, SCREENSHOTS (dir), CHROMIUM (browser binary),
//      SFT_RUN_ID (TRL SFTTrainer, its code uploaded with --code), GRPO_RUN_ID (TRL GRPOTrainer, log_completions).
import { apiClient } from './api.mjs';
import { launchChromium, stepsOf } from './browser.mjs';

const base = (process.env.RLPLANE_URL ?? '').replace(/\/$/, '');
const token = process.env.RLPLANE_TOKEN ?? '';
const shots = process.env.SCREENSHOTS ?? 'e2e/screenshots';
const sftRun = process.env.SFT_RUN_ID;
const grpoRun = process.env.GRPO_RUN_ID;
const { apiGet } = apiClient(base, token);

function fail(message) {
  console.error(`e2e FAILED: ${message}`);
  process.exit(1);
}
if (!base || !token || !sftRun || !grpoRun) fail('set RLPLANE_URL, RLPLANE_TOKEN, SFT_RUN_ID and GRPO_RUN_ID');

let page;
const { step, shot } = stepsOf({ shots, currentPage: () => page, fail });
const points = async (runId, key) => (await apiGet(`/runs/${runId}/metrics?keys=${encodeURIComponent(key)}&max_points=10000`)).series[0].points.length;

const browser = await launchChromium();
const pageErrors = [];
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  page = await context.newPage();
  page.setDefaultTimeout(20_000);
  page.on('pageerror', (err) => pageErrors.push(err.message));

  await step('sign in', async () => {
    await page.goto(`${base}/signin?next=%2Fruns`);
    await page.getByLabel('API token').fill(token);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/runs$/);
  });

  await step('the TRL SFT run: its loss chart has every point the callback logged', async () => {
    const logged = await points(sftRun, 'train/loss');
    await page.goto(`${base}/runs/${sftRun}`);
    const chart = page.locator('[data-chart="train/loss"]');
    await chart.waitFor();
    await page.waitForFunction(
      ([n]) => Number(document.querySelector('[data-chart="train/loss"]')?.getAttribute('data-points')) === n,
      [logged],
    );
    await page.locator('[data-chart="train/lr"]').waitFor();
    await shot('c1-trl-sft-charts');
  });

  await step('the TRL GRPO run: reward in the Reward panel, completions grouped by prompt', async () => {
    const logged = await points(grpoRun, 'reward/mean');
    await page.goto(`${base}/runs/${grpoRun}`);
    const chart = page.getByRole('region', { name: 'Reward', exact: true }).locator('[data-chart="reward/mean"]');
    await chart.waitFor();
    await page.waitForFunction(
      ([n]) => Number(document.querySelector('[data-chart="reward/mean"]')?.getAttribute('data-points')) === n,
      [logged],
    );
    const all = (await apiGet(`/runs/${grpoRun}/samples?limit=1000`)).data;
    const latest = Math.max(...all.map((x) => x.step));
    const byPrompt = new Map();
    for (const x of all.filter((x) => x.step === latest)) byPrompt.set(x.prompt_hash, (byPrompt.get(x.prompt_hash) ?? 0) + 1);
    await page.goto(`${base}/runs/${grpoRun}/samples`);
    const groups = page.locator(`.sample-groups[data-step="${latest}"] section.sample-group`);
    await groups.first().waitFor();
    if ((await groups.count()) !== byPrompt.size) throw new Error(`${await groups.count()} groups shown, ${byPrompt.size} logged`);
    for (const [hash, count] of byPrompt) {
      const shown = await page.locator(`section.sample-group[data-prompt-hash="${hash}"] article.sample`).count();
      if (shown !== count) throw new Error(`prompt ${hash}: ${shown} completions shown, ${count} logged`);
    }
    const first = await page.locator('article.sample').first().innerText();
    if (!/advantage/.test(first) || !/correct/.test(first)) throw new Error(`a completion without its advantage and reward component: ${first}`);
    await shot('c2-trl-grpo-samples');
  });

  await step('the SFT run\'s code and environment: its snapshot, its commit and its packages', async () => {
    const run = await apiGet(`/runs/${sftRun}`);
    await page.goto(`${base}/runs/${sftRun}/code`);
    const snapshot = page.getByTestId('code-snapshot');
    await snapshot.waitFor();
    if (!run.spec.command.code.snapshot.startsWith((await snapshot.innerText()).trim().replace(/…$/, ''))) {
      throw new Error(`snapshot shown as ${await snapshot.innerText()}, the run's is ${run.spec.command.code.snapshot}`);
    }
    await page.getByLabel('Filter packages').fill('trl');
    const row = page.getByRole('table', { name: 'Installed packages' }).getByRole('row', { name: /^trl 1\.16\.0$/ });
    await row.waitFor();
    await shot('c3-trl-sft-code');
  });

  if (pageErrors.length) fail(`errors in the page: ${pageErrors.join('; ')}`);
} finally {
  await browser.close();
}
console.log('command runs e2e passed');
