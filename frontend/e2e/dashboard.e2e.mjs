// End-to-end check of the dashboard against a live `rlplane up`.
// env: RLPLANE_URL (serving the built dashboard at /), RLPLANE_TOKEN, SCREENSHOTS (dir),
//      RUN_ID (optional: a run training now; it gets cancelled, then a tiny run is submitted from
//      New run and must train on the freed worker), SAMPLES_RUN_ID (optional: a finished PPO
//      run: its reward and KL charts, and samples of the same prompts at several steps), CHROMIUM (browser binary).
// RUN_ID's spec is expected as submitted YAML with a comment (the Spec tab and Clone must keep it): SPEC_COMMENT.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { apiClient, lineOf } from './api.mjs';
import { launchChromium, stepsOf } from './browser.mjs';
import { samplesSteps } from './samples.steps.mjs';

const base = (process.env.RLPLANE_URL ?? '').replace(/\/$/, '');
const token = process.env.RLPLANE_TOKEN ?? '';
const shots = process.env.SCREENSHOTS ?? 'e2e/screenshots';
const runId = process.env.RUN_ID;
const samplesRunId = process.env.SAMPLES_RUN_ID;
const specComment = process.env.SPEC_COMMENT;

const { apiGet, apiPost } = apiClient(base, token);

function fail(message) {
  console.error(`e2e FAILED: ${message}`);
  process.exit(1);
}
if (!base) fail('set RLPLANE_URL to the server serving the dashboard, e.g. http://127.0.0.1:8000');
if (!token) fail('set RLPLANE_TOKEN to an API token (e.g. the contents of $RLPLANE_HOME/admin.token)');
mkdirSync(shots, { recursive: true });

let page;
const { step, shot } = stepsOf({ shots, currentPage: () => page, fail });
const browser = await launchChromium();
const pageErrors = [];
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
  page = await context.newPage();
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

  if (samplesRunId) {
    await step('runs list: headline metric per algorithm and config columns kept across a reload', async () => {
      const row = page.locator(`tr[data-run-id="${samplesRunId}"]`);
      await row.filter({ hasText: 'reward/mean' }).waitFor({ timeout: 15_000 });
      const cell = async (column) => (await row.locator(`td[data-column="${column}"]`).innerText()).trim();
      if ((await cell('batch_size')) !== '20') throw new Error(`batch size column reads ${await cell('batch_size')}, expected 20`);
      if ((await cell('model')) !== 'builtin:tiny-gpt2') throw new Error(`model column reads ${await cell('model')}`);
      await page.locator('.column-picker summary').click();
      await page.getByRole('checkbox', { name: 'Precision' }).check();
      await page.getByRole('checkbox', { name: 'LR' }).uncheck();
      await page.reload();
      await row.waitFor();
      if (!(await row.locator('td[data-column="precision"]').count())) throw new Error('the Precision column was not kept across a reload');
      if (await page.locator('th[data-column="lr"]').count()) throw new Error('the LR column came back after a reload');
      await shot('02b-runs-columns');
      // Back to the defaults for the rest of the run.
      await page.evaluate(() => localStorage.removeItem('rlplane.runs.columns'));
    });
  }

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
      const first = page.locator('.log-line').first();
      await first.waitFor({ timeout: 30_000 });
      const time = first.locator('time');
      const clock = await time.innerText();
      const full = await time.getAttribute('title');
      if (!/^\d\d:\d\d:\d\d$/.test(clock)) throw new Error(`a log line's time reads "${clock}", expected HH:MM:SS`);
      if (!/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$/.test(full ?? '') || !full.includes(clock)) {
        throw new Error(`a log line's full date on hover reads "${full}"`);
      }
      await shot('04-run-logs');
    });

    await step('spec tab shows the YAML', async () => {
      await page.getByRole('link', { name: 'Spec', exact: true }).click();
      await page.waitForURL(new RegExp(`/runs/${runId}/spec$`));
      const pre = page.locator('pre.spec');
      await pre.filter({ hasText: 'algorithm:' }).waitFor();
      const text = await pre.innerText();
      if (specComment && !text.includes(specComment)) throw new Error(`the Spec tab lost the submitted comment "${specComment}"`);
      if (text.includes('dpo: null')) throw new Error('the Spec tab shows the stored expansion, not the spec as submitted');
      await page.getByRole('button', { name: 'Copy' }).click();
      await page.getByRole('status').filter({ hasText: 'Copied' }).waitFor();
      const copied = await page.evaluate(() => navigator.clipboard.readText());
      if (copied.trim() !== text.trim()) throw new Error('Copy put other text on the clipboard than the Spec tab shows');
      await shot('05-run-spec');
    });

    await step('cancel from the UI, after a confirmation', async () => {
      await page.getByRole('button', { name: 'Cancel', exact: true }).click();
      const dialog = page.getByRole('dialog', { name: `Cancel run #${runId}?` });
      await dialog.waitFor();
      await shot('06a-run-cancel-confirm');
      await dialog.getByRole('button', { name: 'Cancel run' }).click();
      const badge = page.locator('.run-title .badge');
      await page.waitForFunction(
        () => document.querySelector('.run-title .badge')?.getAttribute('data-status') === 'cancelled',
        null,
        { timeout: 90_000, polling: 250 },
      ).catch(async () => {
        throw new Error(`status is ${await badge.getAttribute('data-status')}, expected cancelled within 90 s`);
      });
      // A cancelled run is resumable (it stopped on request, not on its own spec).
      await page.getByRole('button', { name: 'Resume' }).waitFor();
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
      // A template that starts from another run names it by a placeholder the server explains, on its line.
      await page.getByLabel('Template').selectOption('grpo');
      const grpo = await editor.inputValue();
      if (!grpo.includes('path: run:<id of your sft-arithmetic run>@250')) throw new Error('the grpo template has no run placeholder');
      if (grpo.includes('./runs/')) throw new Error('the grpo template names a path on the submitter\'s machine');
      const pathLine = lineOf(grpo, /^\s+path: run:</);
      const placeholder = page.locator('.spec-errors li').filter({ hasText: "is a template's placeholder" });
      await placeholder.waitFor();
      if (!(await placeholder.innerText()).startsWith(`line ${pathLine} model.path`)) {
        throw new Error(`the placeholder error is not on model.path's line ${pathLine}: ${await placeholder.innerText()}`);
      }
      await shot('07a-new-run-placeholder');
      await page.getByLabel('Template').selectOption('sft');
      await page.waitForFunction(() => document.querySelector('textarea#spec-text')?.value.includes('algorithm: sft'));
      // Accepted but almost certainly a mistake: a warning on its line, beside any errors.
      const risky = template.replace(/lr: [^\n#]+/, 'lr: 1 ');
      await editor.fill(risky);
      const warning = page.locator('.spec-warnings li').filter({ hasText: 'train.lr' });
      await warning.waitFor();
      const lrLine = lineOf(risky, /^\s+lr: 1/);
      if (!(await warning.innerText()).startsWith(`line ${lrLine} train.lr`)) throw new Error(`the lr warning is not on line ${lrLine}`);
      await page.getByTestId('spec-valid').waitFor();
      await shot('07b-new-run-warning');
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

    await step('Clone opens New run with the spec as submitted, renamed -clone, comments kept', async () => {
      await page.goto(`${base}/runs/${runId}`);
      await page.getByRole('link', { name: 'Clone' }).click();
      await page.waitForURL(new RegExp(`/new\\?clone=${runId}$`));
      await page.waitForFunction(() => document.querySelector('textarea#spec-text')?.value.includes('-clone'), null, { timeout: 10_000 });
      const text = await page.getByRole('textbox', { name: 'Run spec (YAML)' }).inputValue();
      if (!/^name: e2e-live-clone$/m.test(text)) throw new Error(`the clone is not named e2e-live-clone:\n${text}`);
      if (specComment && !text.includes(specComment)) throw new Error('the clone lost the spec\'s comments');
      if (text.includes('dpo: null')) throw new Error('the clone is the stored expansion, not the spec as submitted');
      await shot('10b-clone');
    });

    await step('checkpoints: eval metrics at the step, readable metadata, the whole checkpoint downloads', async () => {
      await page.goto(`${base}/runs/${newRunId}/checkpoints`);
      // The run checkpoints and evaluates at step 200; the tab polls its list.
      const row = page.locator('tr[data-step="200"][data-kind="checkpoint"]');
      await row.waitFor({ timeout: 120_000 });
      const evalLoss = row.locator('dt', { hasText: 'eval/loss' }).locator('xpath=following-sibling::dd[1]');
      await evalLoss.waitFor({ timeout: 15_000 });
      const value = await evalLoss.innerText();
      if (!/^-?\d/.test(value) || value.includes('(step')) throw new Error(`eval/loss at step 200 reads "${value}"`);
      if ((await row.innerText()).includes('{"')) throw new Error('the metadata is shown as raw JSON');
      await row.locator('dt', { hasText: 'sha256' }).waitFor();
      await shot('16-checkpoints');
      const [download] = await Promise.all([
        page.waitForEvent('download', { timeout: 60_000 }),
        row.getByRole('button', { name: /^Download/ }).click(),
      ]);
      const expected = `run-${newRunId}-checkpoint-step-200.tar`;
      if (download.suggestedFilename() !== expected) throw new Error(`downloaded ${download.suggestedFilename()}, expected ${expected}`);
      const saved = await download.path();
      const { size } = await import('node:fs').then((fs) => fs.promises.stat(saved));
      const listed = (await apiGet(`/runs/${newRunId}/checkpoints`)).data.find((c) => c.step === 200 && c.kind === 'checkpoint');
      if (size < listed.size) throw new Error(`the tar holds ${size} bytes, less than the checkpoint's ${listed.size}`);
      console.log(`    ${expected}: ${size} bytes`);
    });

    await step('start a run from a checkpoint: the source spec, model at that step, a new name', async () => {
      const row = page.locator('tr[data-step="200"][data-kind="checkpoint"]');
      await row.getByRole('link', { name: 'Start a run from this checkpoint' }).click();
      await page.waitForURL(/\/new\?/);
      await page.waitForFunction(() => document.querySelector('textarea#spec-text')?.value.includes('-from-step-200'), null, { timeout: 10_000 });
      const text = await page.getByRole('textbox', { name: 'Run spec (YAML)' }).inputValue();
      if (!text.includes(`path: run:${newRunId}@200`)) throw new Error(`model.path is not run:${newRunId}@200:\n${text}`);
      if (!/^name: e2e-from-new-run-from-step-200/m.test(text)) throw new Error('the new run is not renamed');
      if (!text.includes('# Supervised fine-tuning')) throw new Error('the source spec\'s comments are gone');
      await page.getByTestId('spec-valid').waitFor();
      await shot('17-from-checkpoint');
    });

    await step('evaluate a checkpoint: Evaluate opens an eval spec of it, submitted; the result shows under the checkpoint', async () => {
      await page.goto(`${base}/runs/${newRunId}/checkpoints`);
      const row = page.locator('tr[data-step="200"][data-kind="checkpoint"]');
      await row.getByRole('link', { name: 'Evaluate' }).click();
      await page.waitForURL(/\/new\?.*algorithm=eval/);
      const editor = page.getByRole('textbox', { name: 'Run spec (YAML)' });
      await page.waitForFunction(() => document.querySelector('textarea#spec-text')?.value.includes('algorithm: eval'), null, { timeout: 10_000 });
      await page.waitForFunction((id) => document.querySelector('textarea#spec-text')?.value.includes(`run:${id}@200`), newRunId, { timeout: 10_000 });
      // The SFT run read builtin:tiny-sft (no prompts to answer) and has no reward: the page says so, the API refuses
      // the data until it names prompts.
      await page.getByText(/has no reward to reuse/).waitFor();
      const text = await editor.inputValue();
      await page.locator('.spec-errors').filter({ hasText: 'data.source' }).waitFor({ timeout: 10_000 });
      await editor.fill(text.replace(/source: builtin:tiny-sft/, 'source: builtin:arithmetic').replace(/samples: \d+/, 'samples: 4\n  max_prompts: 16').replace(/k: \[[^\]]*\]/, 'k: [1, 4]'));
      await page.getByTestId('spec-valid').waitFor();
      await page.getByRole('button', { name: 'Submit run' }).click();
      await page.waitForURL(/\/runs\/\d+$/);
      const evalRunId = Number(page.url().match(/\/runs\/(\d+)$/)[1]);
      const deadline = Date.now() + 240_000;
      let evalRun;
      while ((evalRun = await apiGet(`/runs/${evalRunId}`)).status !== 'succeeded') {
        if (['failed', 'cancelled', 'lost'].includes(evalRun.status) || Date.now() > deadline) {
          throw new Error(`eval run ${evalRunId} is ${evalRun.status}`);
        }
        await page.waitForTimeout(1000);
      }
      if (evalRun.algorithm !== 'eval') throw new Error(`run ${evalRunId} is ${evalRun.algorithm}, not eval`);
      await page.goto(`${base}/runs/${newRunId}/checkpoints`);
      const shown = page.locator('table.evaluations', { hasText: 'Evaluations of step 200' }).locator(`tr[data-run="${evalRunId}"]`);
      const passAt4 = shown.locator('td[data-key="eval/pass@4"]');
      await passAt4.waitFor({ timeout: 30_000 });
      const value = parseFloat(await passAt4.innerText());
      if (!(value >= 0 && value <= 1)) throw new Error(`pass@4 of run ${evalRunId} reads "${await passAt4.innerText()}"`);
      // sampled, 4 answers a prompt: said beside the value, so it is not read as the run's greedy accuracy
      if (!(await passAt4.innerText()).includes('T=1 ×4')) throw new Error(`pass@4 says no decoding: "${await passAt4.innerText()}"`);
      console.log(`    eval run ${evalRunId} of run ${newRunId}@200: pass@4 ${value}`);
      await shot('18-checkpoint-evaluated');
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
  }

  await samplesSteps({ page, base, step, shot, runId, newRunId, samplesRunId, apiGet, apiPost });

  if (samplesRunId) {
    await step('compare: the same prompts side by side across runs, followed across steps, two answers diffed', async () => {
      await page.setViewportSize({ width: 800, height: 900 });
      const requests = [];
      page.on('request', (r) => r.url().includes('/api/v1/samples') && requests.push(r.url()));
      await page.goto(`${base}/compare?runs=${samplesRunId},${runId}&view=samples`);
      await page.locator('[data-testid="compare-samples"][aria-busy="false"]').waitFor();
      // a prompt the PPO run answered (the SFT run's generations are of other prompts)
      const ppoAnswer = page.locator(`[data-testid="sample-answer"][data-run="${samplesRunId}"]`);
      const block = page.getByTestId('sample-prompt').filter({ has: ppoAnswer }).first();
      await block.waitFor();
      await block.locator(`[data-testid="sample-column"][data-run="${runId}"]`).waitFor(); // the other run's column, answered or not
      if (requests.length !== 1 || !requests[0].includes(`runs=${samplesRunId}%2C${runId}`) && !requests[0].includes(`runs=${samplesRunId},${runId}`)) {
        throw new Error(`expected one request for both runs, saw ${JSON.stringify(requests)}`);
      }
      await block.getByTestId('follow-prompt').click();
      await page.locator('[data-testid="compare-samples"][data-at="all"][aria-busy="false"]').waitFor();
      const answers = page.locator(`[data-testid="sample-answer"][data-run="${samplesRunId}"]`);
      await answers.nth(1).waitFor();
      const steps = new Set(await answers.evaluateAll((els) => els.map((el) => el.getAttribute('data-step'))));
      if (steps.size < 2) throw new Error(`following a prompt shows steps ${[...steps]}`);
      await answers.nth(0).getByRole('checkbox').check();
      await answers.last().getByRole('checkbox').check();
      await page.getByTestId('diff-output').waitFor();
      const wide = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      if (wide > 1) throw new Error(`the samples view widens the page by ${wide} px`);
      await shot('11b-compare-samples');
      await page.setViewportSize({ width: 1400, height: 900 });
    });
  }

  await step('pipelines: the stages drawn with status, gate, edge and run link; cancel from the page', async () => {
    const sft = (path, steps) => ({
      algorithm: 'sft',
      model: { path, max_seq_len: 32 },
      data: { source: 'builtin:arithmetic' },
      train: { steps, batch_size: 4, eval_every: null, checkpoint_every: null },
    });
    const created = await apiPost('/pipelines', {
      name: 'e2e-pipeline',
      stages: {
        first: { spec: sft('builtin:tiny-gpt2', 20000) },
        second: { when: 'stages.first.metrics["train/loss"] < 9', spec: sft('stage:first', 10) },
      },
    });
    const firstRun = created.stages[0].run_id;
    await page.goto(`${base}/pipelines`);
    await page.locator(`tr[data-pipeline-id="${created.id}"]`).getByRole('link', { name: 'e2e-pipeline' }).click();
    await page.waitForURL(new RegExp(`/pipelines/${created.id}$`));
    const first = page.locator('li.stage-node[data-stage="first"]');
    const second = page.locator('li.stage-node[data-stage="second"]');
    await first.and(page.locator('[data-status="running"]')).waitFor();
    await second.and(page.locator('[data-status="waiting"]')).waitFor();
    await page.locator('path[data-from="first"][data-to="second"]').waitFor({ state: 'attached' }); // a thin stroke: 'visible' may not count it
    if (!(await second.innerText()).includes('stages.first.metrics["train/loss"] < 9')) throw new Error('the gate is not shown');
    if ((await first.getByRole('link', { name: `run #${firstRun}` }).getAttribute('href')) !== `/runs/${firstRun}`) {
      throw new Error(`stage first does not link to its run ${firstRun}`);
    }
    await shot('13b-pipeline');
    await page.getByRole('button', { name: 'Cancel pipeline' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel pipeline' }).click();
    await second.and(page.locator('[data-status="cancelled"]')).waitFor();
    const stored = await apiGet(`/pipelines/${created.id}`);
    if (stored.status !== 'cancelled') throw new Error(`the API says the pipeline is ${stored.status}`);
    const run = await apiGet(`/runs/${firstRun}`);
    if (!['cancelling', 'cancelled'].includes(run.status)) throw new Error(`stage first's run is ${run.status}`);
  });

  await step('sweeps: the trials table shows live states; cancel from the page', async () => {
    const created = await apiPost('/sweeps', {
      name: 'e2e-sweep',
      spec: {
        algorithm: 'sft',
        model: { path: 'builtin:tiny-gpt2', max_seq_len: 32 },
        data: { source: 'builtin:arithmetic' },
        train: { steps: 20000, batch_size: 4, eval_every: null, checkpoint_every: null },
      },
      space: { 'train.lr': { type: 'categorical', choices: [0.0001, 0.001] } },
      method: 'grid',
      metric: 'train/loss',
      trials: 2,
      parallel: 1,
    });
    await page.goto(`${base}/sweeps`);
    await page.locator(`tr[data-sweep-id="${created.id}"]`).getByRole('link', { name: 'e2e-sweep' }).click();
    await page.waitForURL(new RegExp(`/sweeps/${created.id}$`));
    const first = page.locator('table.trials tr[data-trial="0"]');
    await first.waitFor();
    await page.locator('table.trials th[data-path="train.lr"]').waitFor();
    // queued while its run waits for the worker, running once the worker has it: as the API says, never ahead of it
    const shown = await first.innerText();
    const said = (await apiGet(`/sweeps/${created.id}`)).trial_list[0].state;
    if (!/\b(queued|running)\b/.test(shown)) throw new Error(`trial 0 is not shown queued or running: ${shown}`);
    if (said === 'queued' && shown.includes('running')) throw new Error(`trial 0 is shown running while its run is queued: ${shown}`);
    await shot('13c-sweep');
    await page.getByRole('button', { name: 'Cancel sweep' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel sweep' }).click();
    await page.locator('table.trials tr[data-trial="0"]', { hasText: 'cancelled' }).waitFor();
    const stored = await apiGet(`/sweeps/${created.id}`);
    if (stored.status !== 'cancelled' || stored.trials !== 1) throw new Error(`the API says ${stored.status} with ${stored.trials} trials`);
  });

  await step('workers page', async () => {
    await page.goto(`${base}/workers`);
    await page.locator('tr[data-worker]').first().waitFor();
    await shot('14-workers');
  });

  await step('queues and usage pages: who holds the queue, what runs cost', async () => {
    await page.goto(`${base}/queues`);
    // the one worker of rlplane up; what it holds depends on which runs are still going by now
    await page.locator('section[data-queue="cpu"] h2', { hasText: '1 worker' }).waitFor();
    await shot('14b-queues');
    await page.goto(`${base}/usage?by=run`);
    await page.locator(`table.usage-table tr[data-key^="${runId} "]`).waitFor();  // the live run's attempt counts
    const cell = (col) => page.locator(`table.usage-table tr[data-key^="${runId} "] td[data-col="${col}"]`).textContent();
    const [cpuHours, attempts] = [await cell('cpu_slot_hours'), await cell('attempts')];
    if (!(Number(cpuHours) >= 0 && Number(attempts) >= 1)) throw new Error(`run ${runId}: ${cpuHours} CPU slot hours, ${attempts} attempts`);
    await shot('14c-usage');
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

  // Last: a page of its own, and nothing after it depends on it.
  await step('/api/docs renders offline (Swagger UI from the server, nothing from a CDN)', async () => {
    const docs = await context.newPage();
    const outside = [];
    await docs.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith(base)) return route.continue();
      outside.push(url);
      return route.abort();
    });
    await docs.goto(`${base}/api/docs`);
    await docs.locator('.opblock').first().waitFor({ timeout: 20_000 }).catch(async () => {
      await docs.screenshot({ path: join(shots, 'FAILED-api-docs.png') });
      // Swagger UI says why it rendered nothing (e.g. an OpenAPI version it cannot read).
      const said = (await docs.locator('body').innerText()).replace(/\s+/g, ' ').slice(0, 300);
      throw new Error(`no operations rendered${outside.length ? ` (it asked other hosts: ${outside.join(', ')})` : ''}: ${said}`);
    });
    const operations = await docs.locator('.opblock').count();
    await docs.screenshot({ path: join(shots, '19-api-docs.png') });
    await docs.close();
    if (outside.length) throw new Error(`/api/docs asked other hosts: ${outside.join(', ')}`);
    console.log(`    ${operations} operations rendered`);
  });

  if (pageErrors.length) fail(`uncaught errors in the page: ${pageErrors.join(' | ')}`);
  console.log(`e2e passed; screenshots in ${shots}`);
} finally {
  await browser.close();
}
