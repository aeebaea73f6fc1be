import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { until } from '../helpers/runs.js';

/** The Debian package's Chromium; the tests never let a driver download a browser. */
export const CHROMIUM = process.env.SUBAGENTS_TEST_CHROMIUM ?? '/usr/bin/chromium';

export const hasChromium = (): boolean => fs.existsSync(CHROMIUM);

/** Headless Chromium with nothing that reaches the network on its own; playwright gives it a fresh profile. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    chromiumSandbox: false,
    timeout: 60_000,
    args: ['--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** A directory for a test's screenshots that outlives the test's state home (its path is printed). */
export function screenshotDir(name: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `subagents-ui-${name}-`));
}

/** The pid of a run's first agent once its runner has recorded it (read from status.json), or null after 15 s. */
export async function firstAgentPid(home: string, runId: string): Promise<number | null> {
  let pid: number | null = null;
  await until(() => {
    try {
      const st = JSON.parse(fs.readFileSync(path.join(home, 'runs', runId, 'status.json'), 'utf8')) as { steps: Array<{ process: { pid: number } | null }> };
      pid = st.steps[0]?.process?.pid ?? null;
    } catch { /* mid-rename */ }
    return pid !== null;
  }, 15_000);
  return pid;
}
