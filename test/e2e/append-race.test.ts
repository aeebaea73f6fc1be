import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CAT, sleep } from '../helpers/runs.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const RACES = 100;
const WORKERS = 4;

/**
 * SPEC §4.3: an append races the chain's end. Both are decided under the run's lock, so every append is either
 * refused RUN_NOT_ACTIVE or accepted and then run to completion — never accepted and lost. Each worker aims its
 * appends at the moment the chain's last step finishes with a staircase: an acceptance delays its next append more,
 * a refusal less, so the appends keep landing on the boundary. An accepted append becomes the chain's new last step,
 * so the same run races again until an append is refused: one runner start serves several races.
 */
describe('append racing the end of a chain', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome('sa-race-');
    writeAgent(path.join(t.home, 'agents'), 'cat', { backend: 'command', command: [CAT] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
  });
  afterAll(async () => {
    await s?.close();
    t?.cleanup();
  });

  it(`every append is refused RUN_NOT_ACTIVE or accepted and run (${RACES} races)`, async () => {
    let accepted = 0;
    let refused = 0;
    let busy = 0;
    let runs = 0;
    let races = 0;
    const lost: string[] = [];
    // Launches are not what this test is about: on a loaded shared machine one may meet a busy ledger lock, or a
    // dist/ being rebuilt under the runner (HANDSHAKE_FAILED, nothing started); try again.
    const launchRetryingBusy = async (task: string): Promise<string> => {
      for (let attempt = 1; ; attempt++) {
        const l = await s.call('launch', { chain: [{ agent: 'cat', task }] });
        if (l.isError && /^(BUSY|HANDSHAKE_FAILED): /.test(textOf(l)) && attempt < 5) continue;
        expect(l.isError, textOf(l)).toBeFalsy();
        return sc(l).runId as string;
      }
    };
    const worker = async (w: number) => {
      let delay = 30;
      while (races < RACES) {
        const base = `base-${w}-${runs++}`;
        const runId = await launchRetryingBusy(base);
        const tasks = [base];
        for (;;) {
          if (delay > 0) await sleep(delay);
          races++;
          const task = `${base}-appended-${tasks.length}`;
          const a = await s.call('append', { runId, step: { agent: 'cat', task } });
          if (a.isError) {
            // BUSY (a lock held past its 5 s bound on a loaded machine) is a refusal too: nothing was recorded.
            expect(textOf(a)).toMatch(/^(RUN_NOT_ACTIVE|BUSY): /);
            if (textOf(a).startsWith('BUSY')) busy++;
            else { refused++; delay = Math.floor(delay * 0.6); }
            break;
          }
          accepted++;
          expect(sc(a).stepIndex).toBe(tasks.length);
          tasks.push(task);
          delay = Math.ceil(delay * 1.5) + 5;
          if (races >= RACES) break;
        }
        const fin = await waitTerminal(s, runId);
        expect(fin.state, runId).toBe('completed');
        expect(fin.pendingAppends).toBe(0);
        // Every accepted step ran, completed, in order, with its own output; the run's output is the last one's.
        const got = fin.steps.map((st: any) => `${st.state}:${st.output.text}`);
        if (JSON.stringify(got) !== JSON.stringify(tasks.map((x) => `completed:${x}`)) || fin.output.text !== tasks.at(-1)) {
          lost.push(`${runId}: accepted ${JSON.stringify(tasks)}, ran ${JSON.stringify(got)}`);
        }
      }
    };
    await Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
    expect(lost).toEqual([]);
    expect(accepted + refused + busy).toBe(races);
    expect(races).toBeGreaterThanOrEqual(RACES);
    // The staircase keeps both outcomes coming; a run of only one kind would not have tested the race.
    expect(accepted).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
    process.stderr.write(`append race: ${races} races over ${runs} runs: ${accepted} accepted and run, ${refused} refused RUN_NOT_ACTIVE, ${busy} BUSY\n`);
  }, 240_000);
});
