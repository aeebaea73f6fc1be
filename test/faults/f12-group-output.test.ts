/**
 * F12 — a parallel group's huge output. Each member's output is capped by itself, but the group's output joins them
 * all: joined in the runner's memory, 3 members × 64 MiB took the runner to ~790 MiB RSS and 9 × 64 MiB failed the
 * run on the string length limit ("could not run step 0 (internal error)") after every member had completed.
 * Expect: the group's output is streamed to its file, so the runner's peak memory with 9 members × 64 MiB stays near
 * its peak with one member (sampled from /proc; both figures and their ratio are printed); and `{previous}` after a
 * group is bounded — head and tail with the byte counts and the path of the file that holds all of it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, waitTerminal, type Started } from '../helpers/server.js';
import { FAKE, launchOk, sleep, vmKiB } from './fault-helpers.js';

const MB = 1024 * 1024;

/** Runs a launch to its end while sampling its runner's peak resident memory (KiB). */
async function peakOf(s: Started, args: Record<string, unknown>): Promise<{ fin: Record<string, any>; peakKiB: number; runId: string }> {
  const runId = await launchOk(s, args);
  const runner = sc(await s.call('status', { runId })).runnerPid as number;
  let peak = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const hwm = vmKiB(runner, 'VmHWM');
      if (hwm === null) break;
      peak = Math.max(peak, hwm);
      await sleep(50);
    }
  })();
  const fin = await waitTerminal(s, runId, 240_000);
  sampling = false;
  await sampler;
  return { fin, peakKiB: peak, runId };
}

describe.skipIf(process.platform !== 'linux')('F12 a parallel group of huge outputs', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  afterEach(async () => {
    await s.close();
    t.cleanup();
  });

  describe('at the default cap (64 MiB per member)', () => {
    beforeEach(async () => {
      t = tempStateHome();
      writeAgent(path.join(t.home, 'agents'), 'flood64', { backend: 'command', command: ['node', FAKE, 'flood-fast', String(64 * MB)] });
      s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_AGENTS: '16' });
    });

    it('9 members × 64 MiB: the run completes, its output is whole, the runner peak stays near the one-member peak', async () => {
      const one = await peakOf(s, { tasks: [{ agent: 'flood64', task: 'go' }] });
      expect(one.fin.state).toBe('completed');
      const nine = await peakOf(s, { tasks: Array.from({ length: 9 }, () => ({ agent: 'flood64', task: 'go' })), concurrency: 9 });
      expect(nine.fin.state, JSON.stringify(nine.fin.error)).toBe('completed');
      const out = fs.statSync(path.join(t.home, 'runs', nine.runId, 'out', 'run.txt')).size;
      expect(out).toBeGreaterThan(9 * 64 * MB); // every member's 64 MiB, with its heading
      const ratio = nine.peakKiB / one.peakKiB;
      process.stderr.write(`F12 group: runner peak RSS (VmHWM) 1 × 64 MiB ${(one.peakKiB / 1024).toFixed(1)} MiB, 9 × 64 MiB ${(nine.peakKiB / 1024).toFixed(1)} MiB, ratio ${ratio.toFixed(2)}\n`);
      expect(one.peakKiB).toBeGreaterThan(0);
      // Flat: joined in memory, 9 × 64 MiB needed over 1 GiB; bounded loosely (shared machine), the figure is printed.
      expect(ratio).toBeLessThan(1.3);
    }, 300_000);
  });

  describe('{previous} after a group', () => {
    beforeEach(async () => {
      t = tempStateHome();
      writeAgent(path.join(t.home, 'agents'), 'flood1', { backend: 'command', command: ['node', FAKE, 'flood-fast', String(1 * MB)] });
      writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
      s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_OUTPUT_BYTES: String(1 * MB) });
    });

    it('is the head and tail of the joined output with the byte counts and the path of the whole file', async () => {
      const runId = await launchOk(s, {
        chain: [{ parallel: [{ agent: 'flood1', task: 'a' }, { agent: 'flood1', task: 'b' }, { agent: 'flood1', task: 'c' }] }, { agent: 'echo', task: 'PREV<{previous}>' }],
      });
      const fin = await waitTerminal(s, runId, 120_000);
      expect(fin.state).toBe('completed');
      const groupFile = path.join(t.home, 'runs', runId, 'out', '0.txt');
      const groupBytes = fs.statSync(groupFile).size;
      expect(groupBytes).toBeGreaterThan(3 * MB);
      const task = fs.readFileSync(path.join(t.home, 'runs', runId, 'out', '1.txt'), 'utf8');
      expect(fin.steps[1].output.bytes).toBeLessThan(1 * MB + 4096); // the whole task: bounded by the cap, not the group's size
      expect(task.startsWith('PREV<### flood1 #0\n\n')).toBe(true);
      expect(task).toContain(`of ${groupBytes} bytes omitted; the whole text is in ${groupFile}]`);
    }, 180_000);
  });
});
