// What every e2e script does with Chromium: launch Debian's build headless, and run named steps that screenshot
// the page when they fail and say how long each took.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** `step(name, fn)` and `shot(name)` over the page `currentPage()` returns; `fail(message)` ends the script. */
export function stepsOf({ shots, currentPage, fail, prefix = '' }) {
  mkdirSync(shots, { recursive: true });
  const step = async (name, fn) => {
    const started = Date.now();
    try {
      await fn();
    } catch (err) {
      const file = `FAILED-${prefix}${name.replace(/\W+/g, '-')}.png`;
      await currentPage()?.screenshot({ path: join(shots, file), fullPage: true }).catch(() => {});
      fail(`${name}: ${err?.message ?? err}`);
    }
    console.log(`ok  ${name} (${Date.now() - started} ms)`);
  };
  const shot = (name) => currentPage().screenshot({ path: join(shots, `${prefix}${name}.png`), fullPage: true });
  return { step, shot };
}
