/**
 * F9 — wall-clock jumps. Timeouts, kill graces, handshake deadlines and reservation expiry are measured on monotonic
 * clocks (setTimeout / performance.now), never on Date; wall-clock time is only recorded (createdAt, endedAt …).
 * We cannot move this machine's clock, so the jump is made where it matters, without faketime:
 *
 * 1. Across processes — the runner, which owns every step and run timeout: the test seam
 *    `SUBAGENTS_TEST_FAULT=clock:<±3600000>@300` (src/runner/test-clock.ts; forwarded to runners like the other
 *    fault seams, never to agents) steps the runner's `Date` by ±1 h 300 ms after it starts, mid-run. Expect: a step
 *    well inside its limit completes (+1 h does not fire its timeout early), and a step and a run that overrun their
 *    limits end TIMEOUT on time (−1 h does not postpone them). endedAt carries the jump, proving it happened.
 * 2. In-process — the capacity ledger's reclamation (`pruneRoots`, dist/manager/capacity.js) with the global Date
 *    shifted ±1 h: live reservations (bound or unbound) are kept whatever Date says; an unbound reservation is dropped
 *    once twice the handshake timeout has really elapsed, even when Date went back an hour.
 *
 * Known limit, documented rather than tested: proper-lockfile decides staleness from the lock's mtime against
 * Date.now(), so a +jump larger than the stale time while a lock is held could let a second process take it over;
 * critical sections are kept to bounded file work (milliseconds) against a 5 s stale time.
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { REPO } from '../helpers/paths.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { FAKE, launchOk, readStatusFile, sleep } from './fault-helpers.js';

const HOUR = 3_600_000;

describe.each([['+1 h', HOUR], ['-1 h', -HOUR]])('F9 runner wall clock jumps %s mid-run', (_label, offset) => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome();
    const agents = path.join(t.home, 'agents');
    // The three runs end ~0.8 s apart (overrun ~1.8 s, steady ~2.5 s, the run limit ~3.3 s): each jumped runner
    // takes another's lock as stale (the known limit above, which a real clock step, moving every process's clock
    // and the kernel's mtimes alike, does not have), so their closing ledger sections must not meet.
    writeAgent(agents, 'steady', { backend: 'command', command: ['node', FAKE, 'sleep', '2500'], timeoutMs: 20_000 });
    writeAgent(agents, 'overrun', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'], timeoutMs: 1500 });
    writeAgent(agents, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    s = await startServer({
      SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300', SUBAGENTS_TEST_FAULT: `clock:${offset}@300`,
    });
  });
  afterAll(async () => {
    await s.close();
    t.cleanup();
  });

  it('changes no outcome: in-limit steps complete, overruns time out on time', async () => {
    const [steady, overrun, runLimit] = await Promise.all([
      launchOk(s, { agent: 'steady', task: 'x' }),
      launchOk(s, { agent: 'overrun', task: 'x' }),
      launchOk(s, { agent: 'sleeper', task: 'x', timeoutMs: 3000 }),
    ]);
    // Bounds on hangs only: a -1 h jump that postponed a timeout would hang here until the bound.
    const [a, b, c] = await Promise.all([waitTerminal(s, steady, 30_000), waitTerminal(s, overrun, 30_000), waitTerminal(s, runLimit, 30_000)]);
    expect(a.state).toBe('completed');
    expect(a.output.text).toContain('slept');
    expect(b.state).toBe('failed');
    expect(b.steps[0].error.code).toBe('TIMEOUT');
    expect(c.state).toBe('failed');
    expect(c.error.code).toBe('TIMEOUT');
    // The jump really happened in the runner: its endedAt is an hour away from the server's createdAt.
    for (const id of [steady, overrun, runLimit]) {
      const st = readStatusFile(t.home, id);
      const rec = (sc(await s.call('status', { runId: id })) as { createdAt: string }).createdAt;
      const skew = Date.parse(st.endedAt) - Date.parse(rec);
      expect(Math.abs(skew - offset)).toBeLessThan(60_000);
    }
    const list = await s.call('status', {});
    expect(list.isError, textOf(list)).toBeFalsy();
    expect(sc(list).capacity.active).toBe(0);
  });
});

describe('F9 capacity reclamation under a shifted Date (in-process)', () => {
  const RealDate = Date;
  let offset = 0;
  let m: Record<string, any>;
  beforeAll(async () => {
    m = {
      ...(await import(pathToFileURL(path.join(REPO, 'dist', 'manager', 'capacity.js')).href)),
      ...(await import(pathToFileURL(path.join(REPO, 'dist', 'process', 'identity.js')).href)),
    };
    class ShiftedDate extends RealDate {
      constructor(...args: unknown[]) {
        if (args.length === 0) super(RealDate.now() + offset);
        else super(...(args as [number]));
      }
      static override now(): number { return RealDate.now() + offset; }
    }
    globalThis.Date = ShiftedDate as DateConstructor;
  });
  afterEach(() => { offset = 0; });
  afterAll(() => { globalThis.Date = RealDate; });

  it('keeps live reservations through ±1 h jumps and expires an unbound one on real elapsed time only', async () => {
    const me = m.selfIdentity();
    const ledger = {
      v: 1,
      roots: {
        'r-UNBOUNDxxxxxxxxxxxxxxxxx': { at: new Date().toISOString(), server: me, runner: null },
        'r-BOUNDxxxxxxxxxxxxxxxxxxx': { at: new Date().toISOString(), server: me, runner: me },
      },
      trees: {}, agents: {},
    };
    const handshakeMs = 400;
    for (const jump of [HOUR, -HOUR, HOUR, -HOUR]) {
      offset = jump;
      m.pruneRoots(ledger, handshakeMs);
      expect(Object.keys(ledger.roots).sort()).toEqual(['r-BOUNDxxxxxxxxxxxxxxxxxxx', 'r-UNBOUNDxxxxxxxxxxxxxxxxx']);
    }
    // Real time passes (twice the handshake timeout) while Date says we went back an hour: the unbound one expires.
    offset = -HOUR;
    await sleep(handshakeMs * 2 + 200);
    m.pruneRoots(ledger, handshakeMs);
    expect(Object.keys(ledger.roots)).toEqual(['r-BOUNDxxxxxxxxxxxxxxxxxxx']);
  });
});
