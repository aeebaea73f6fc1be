/**
 * F12 — huge output. An agent prints 500 MB (SUBAGENTS_FAULT_FLOOD_MB scales it down on a slow machine) with the
 * output cap (SUBAGENTS_MAX_OUTPUT_BYTES) set to 1 MiB. While it runs, the runner's resident memory is sampled from
 * /proc/<runner>/status (VmRSS every 100 ms, and VmHWM — the kernel's own peak — at the last sample): it must stay
 * flat, far below the output size. Afterwards the stored output is exactly the cap, the step reports the real byte
 * count and `truncated`, and status replies stay bounded by outputBytes however large the output was.
 * Figures are printed (peak RSS, growth over the first sample, throughput) — never asserted as speed.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { FAKE, launchOk, sleep, vmKiB } from './fault-helpers.js';

const MB = 1024 * 1024;
const FLOOD_MB = Number(process.env.SUBAGENTS_FAULT_FLOOD_MB ?? 500);
const CAP = 1 * MB;

describe.skipIf(process.platform !== 'linux')('F12 huge output', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'flood', { backend: 'command', command: ['node', FAKE, 'flood-fast', String(FLOOD_MB * MB)] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_OUTPUT_BYTES: String(CAP) });
  });
  afterAll(async () => {
    await s.close();
    t.cleanup();
  });

  it(`${FLOOD_MB} MB of output: runner memory flat, output capped with the real count, replies bounded`, async () => {
    const runId = await launchOk(s, { agent: 'flood', task: 'go' });
    const first = sc(await s.call('status', { runId }));
    const runner = first.runnerPid as number;
    expect(runner).toBeGreaterThan(0);

    const samples: number[] = [];
    let hwm = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const rss = vmKiB(runner, 'VmRSS');
        if (rss === null) break;
        samples.push(rss);
        hwm = Math.max(hwm, vmKiB(runner, 'VmHWM') ?? 0);
        await sleep(100);
      }
    })();
    const started = performance.now();
    const fin = await waitTerminal(s, runId, 150_000);
    const secs = (performance.now() - started) / 1000;
    sampling = false;
    await sampler;

    expect(fin.state).toBe('completed');
    const step = fin.steps[0];
    expect(step.output.bytes).toBe(FLOOD_MB * MB); // the real count, past the cap
    expect(step.output.truncated).toBe(true);
    // The run's output is that step's: the same real count, and a marker that says what was not kept.
    expect(fin.output.bytes).toBe(FLOOD_MB * MB);
    expect(fin.output.text).toContain(`stored bytes omitted; the agent printed ${FLOOD_MB * MB}, and past the output cap nothing was kept`);
    const stored = fs.statSync(path.join(t.home, 'runs', runId, 'out', '0.txt')).size;
    expect(stored).toBe(CAP);

    const peakKiB = Math.max(hwm, ...samples);
    const growthKiB = peakKiB - (samples[0] ?? peakKiB);
    process.stderr.write(`F12: ${FLOOD_MB} MB in ${secs.toFixed(1)} s (${(FLOOD_MB / secs).toFixed(0)} MB/s); runner RSS first ${((samples[0] ?? 0) / 1024).toFixed(1)} MiB, peak ${(peakKiB / 1024).toFixed(1)} MiB (VmHWM ${(hwm / 1024).toFixed(1)} MiB), growth ${(growthKiB / 1024).toFixed(1)} MiB over ${samples.length} samples\n`);
    expect(samples.length).toBeGreaterThan(0);
    expect(peakKiB).toBeLessThan(200 * 1024); // flat: a runner that buffered even a tenth of the output would exceed it
    expect(growthKiB).toBeLessThan(100 * 1024);

    // Status replies stay bounded by outputBytes, whatever the output size.
    for (const outputBytes of [1024, 8192, 65536]) {
      const r = await s.call('status', { runId, outputBytes });
      expect(r.isError, textOf(r)).toBeFalsy();
      const size = Buffer.byteLength(JSON.stringify(r.structuredContent));
      expect(size).toBeLessThan(outputBytes + 8 * 1024);
      expect(sc(r).output.truncated).toBe(true);
    }
    const dflt = await s.call('status', { runId });
    expect(Buffer.byteLength(textOf(dflt))).toBeLessThan(64 * 1024);
  }, 180_000);
});
