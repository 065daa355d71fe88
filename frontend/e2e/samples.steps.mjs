// The Samples tab's end-to-end steps (dashboard.e2e.mjs runs them): what the page shows must match
// what each run logged, read through the API.
import { ENDED } from './api.mjs';

export async function samplesSteps({ page, base, step, shot, runId, newRunId, samplesRunId, apiGet, apiPost }) {
  await step('samples of an ended run without any say so, and never that they may still come', async () => {
    // On a queue no worker serves, cancelled while it waits: it ends without ever logging a sample.
    const spec = {
      name: 'e2e-never-started', algorithm: 'sft', model: { path: 'builtin:tiny-gpt2' }, data: { source: 'builtin:arithmetic' },
      train: { steps: 10 }, resources: { queue: 'e2e-no-worker' },
    };
    const queued = await apiPost('/runs', spec);
    const cancelled = await apiPost(`/runs/${queued.id}/cancel`);
    if (!ENDED.includes(cancelled.status) && cancelled.status !== 'cancelling') throw new Error(`cancel answered ${cancelled.status}`);
    await page.goto(`${base}/runs/${queued.id}/samples`);
    const logged = (await apiGet(`/runs/${queued.id}/samples?limit=1`)).count;
    if (logged) throw new Error(`run ${queued.id} logged ${logged} samples before its cancel`);
    const note = page.getByTestId('no-samples');
    await note.waitFor();
    const text = await note.innerText();
    if (!text.startsWith('This run ended without logging any samples') || /\byet\b/.test(text)) throw new Error(`it says: ${text}`);
    await shot('11a-no-samples');
  });

  if (samplesRunId) {
    await step('samples: one group per prompt, labelled, with its numbers; previous step', async () => {
      const all = (await apiGet(`/runs/${samplesRunId}/samples?limit=1000`)).data;
      const steps = [...new Set(all.map((x) => x.step))].sort((a, b) => a - b);
      const latest = steps.at(-1);
      await page.goto(`${base}/runs/${samplesRunId}/samples`);
      const groups = page.locator(`.sample-groups[data-step="${latest}"] section.sample-group`);
      await groups.first().waitFor();
      // What the run logged at that step, grouped by prompt as the page must group it.
      const atStep = all.filter((x) => x.step === latest);
      const byPrompt = new Map();
      for (const x of atStep) byPrompt.set(x.prompt_hash, (byPrompt.get(x.prompt_hash) ?? 0) + 1);
      if ((await groups.count()) !== byPrompt.size) throw new Error(`${await groups.count()} groups at step ${latest}, the run logged ${byPrompt.size} prompts`);
      for (const [hash, count] of byPrompt) {
        const group = page.locator(`section.sample-group[data-prompt-hash="${hash}"]`);
        if ((await group.locator('.field-label', { hasText: /^Prompt$/ }).count()) !== 1) throw new Error(`prompt ${hash} is not shown once`);
        const responses = group.locator('article.sample');
        if ((await responses.count()) !== count) throw new Error(`prompt ${hash}: ${await responses.count()} responses shown, ${count} logged`);
        const first = await responses.first().innerText();
        if (!/Response/.test(first) || !/reward -?\d/.test(first) || !/KL -?\d/.test(first)) throw new Error(`a response without its label, reward and KL: ${first}`);
      }
      await shot('12-samples-step');
      const previous = steps.at(-2);
      if (previous == null) {
        if (!(await page.getByRole('button', { name: /Previous/ }).isDisabled())) throw new Error('Previous is enabled on the only step with samples');
        return;
      }
      await page.getByRole('button', { name: /Previous/ }).click();
      await page.locator(`.sample-groups[data-step="${previous}"][aria-busy="false"] section.sample-group`).first().waitFor();
      if ((await page.getByLabel('Step', { exact: true }).inputValue()) !== String(previous)) throw new Error('the step field did not follow Previous');
      await page.getByRole('button', { name: /Next/ }).click();
      await page.locator(`.sample-groups[data-step="${latest}"][aria-busy="false"]`).waitFor();
    });

    await step('follow a prompt across steps: the cards wrap inside a narrow window', async () => {
      await page.setViewportSize({ width: 800, height: 900 });
      const select = page.getByLabel('Follow a prompt');
      const option = await select.locator('option').nth(1).getAttribute('value');
      await select.selectOption(option);
      const steps = new Set((await apiGet(`/runs/${samplesRunId}/samples?prompt_hash=${option}&limit=1000`)).data.map((x) => x.step));
      const cards = page.locator('.step-cards section.step-card');
      await cards.nth(steps.size - 1).waitFor();
      if ((await cards.count()) !== steps.size) throw new Error(`${await cards.count()} step cards, the prompt was logged at ${steps.size} steps`);
      const overflow = await page.evaluate(() => {
        const width = document.documentElement.clientWidth;
        const cardsOut = [...document.querySelectorAll('.step-card')].filter((c) => c.getBoundingClientRect().right > width + 1).length;
        return { cardsOut, page: document.documentElement.scrollWidth - width };
      });
      if (overflow.cardsOut || overflow.page > 0) throw new Error(`cards run off the page: ${JSON.stringify(overflow)}`);
      await shot('13-samples-one-prompt');
      await page.setViewportSize({ width: 1400, height: 900 });
    });
  }

  for (const id of [runId, newRunId].filter(Boolean)) {
    await step(`run ${id}: an SFT run's samples (generations beside the reference answer) as it logged them`, async () => {
      // Read what it logged once it has ended, so no new step comes between the API's answer and the page's.
      const deadline = Date.now() + 120_000;
      while (!ENDED.includes((await apiGet(`/runs/${id}`)).status)) {
        if (Date.now() > deadline) throw new Error(`run ${id} did not end within 120 s`);
        await page.waitForTimeout(1000);
      }
      const logged = (await apiGet(`/runs/${id}/samples?limit=1000`)).data;
      await page.goto(`${base}/runs/${id}/samples`);
      if (!logged.length) {
        await page.getByTestId('no-samples').waitFor();
        console.log(`    run ${id} logged no samples`);
        return;
      }
      const latest = Math.max(...logged.map((x) => x.step));
      await page.locator(`.sample-groups[data-step="${latest}"]`).waitFor();
      const atStep = logged.filter((x) => x.step === latest);
      const shown = page.locator('div.beside[data-label="generation"]');
      const expected = atStep.filter((x) => x.label === 'generation').length;
      if ((await shown.count()) !== expected) throw new Error(`${await shown.count()} generations shown at step ${latest}, ${expected} logged`);
      for (const x of atStep.filter((x) => x.label === 'generation').slice(0, 3)) {
        const text = await page.locator(`section.sample-group[data-prompt-hash="${x.prompt_hash}"] div.beside[data-label="generation"]`).first().innerText();
        if (!text.includes("Model's answer") || !text.includes('Reference answer') || (x.reference && !text.includes(x.reference.trim()))) {
          throw new Error(`a generation without its reference answer: ${text}`);
        }
      }
      console.log(`    run ${id} step ${latest}: ${expected} generations beside their references`);
      await shot(`18-sft-generations-${id}`);
    });
  }
}
