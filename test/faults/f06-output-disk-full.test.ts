/**
 * F6 — the agent's output fills the disk. The state home is on a real tmpfs of 4 MiB, mounted by the test (skipped,
 * with the reason, where mounting is not permitted), and the agent prints 16 MiB. A refused output write used to be
 * thrown inside the socket's read callback: the runner died without a word, the agent ran on unsupervised, and the
 * run stayed `running`. Expect: the runner lives on, the run ends `failed`/STEP_FAILED naming the real cause (disk
 * full while writing step 0's output), the agent's bytes are still counted, and no process of the run remains.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { FAKE, launchOk, mountTmpfs, pidsWithToken, readRecord, until } from './fault-helpers.js';

const MB = 1024 * 1024;

const mounted = mountTmpfs(4);
const skipReason = typeof mounted === 'string' ? mounted : null;
if (skipReason) process.stderr.write(`F6 output disk full: skipped: ${skipReason}\n`);

describe.skipIf(skipReason !== null)('F6 the agent output fills the disk', () => {
  const m = mounted as { dir: string; unmount: () => void };
  const home = path.join(m?.dir ?? '', 'home');
  let root: string;
  let s: Started;
  beforeAll(async () => {
    fs.mkdirSync(home, { mode: 0o700 });
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-root-'));
    writeAgent(path.join(home, 'agents'), 'flood', { backend: 'command', command: ['node', FAKE, 'flood-fast', String(16 * MB)] });
    s = await startServer({ SUBAGENTS_HOME: home, SUBAGENTS_ROOTS: root });
  });
  afterAll(async () => {
    await s?.close();
    m.unmount();
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('the run ends failed with the real cause; the runner supervised the agent to its end; nothing is left running', async () => {
    const runId = await launchOk(s, { agent: 'flood', task: 'go' });
    const token = readRecord(home, runId).runToken as string;
    const fin = await waitTerminal(s, runId, 90_000);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('STEP_FAILED');
    expect(fin.error.message).toContain("disk full while writing step 0's output (ENOSPC)");
    expect(fin.steps[0].output.bytes).toBe(16 * MB); // counted past the refusal
    expect(await until(() => pidsWithToken(token).length === 0, 10_000)).toBe(true);
    const log = fs.readFileSync(path.join(home, 'runs', runId, 'runner.log'), 'utf8');
    expect(log).not.toMatch(/fatal|internal error/);
    // The server keeps working on the same (still nearly full) home once the output is gone.
    fs.rmSync(path.join(home, 'runs', runId, 'out'), { recursive: true, force: true });
    const list = await s.call('status', {});
    expect(list.isError, textOf(list)).toBeFalsy();
    expect(sc(list).runs.length).toBe(1);
  }, 120_000);
});
