/**
 * A server SIGKILLed inside a lock section (docs/reliability.md, "Locks"): its lock names it (pid + start time), so the
 * next server clears it at once instead of waiting out the stale time. Asserted by the absence of BUSY with the lock
 * wait shrunk below the stale time (SUBAGENTS_LOCK_WAIT_MS), not by timing.
 *
 * How: the test seam `SUBAGENTS_TEST_FAULT=kill-in-lock:<name>` makes a process kill itself with SIGKILL right after
 * taking the lock on `<name>`: here the server, in its launch's ledger section.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { lockDirs } from '../helpers/locks.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal } from '../helpers/server.js';
import { FAKE } from './fault-helpers.js';
import { until } from '../e2e/support.js';

describe('a server SIGKILLed holding a lock', () => {
  let t: ReturnType<typeof tempStateHome>;
  let env: Record<string, string>;
  beforeEach(() => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    // A lock wait well under the 5 s stale time: only clearing the dead holder's lock at once avoids BUSY.
    env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_LOCK_WAIT_MS: '1000' };
  });
  afterEach(() => t.cleanup());

  // The ledger: every launch takes it, so a dead holder of it blocks the next server's launches (without the clear
  // this answers BUSY). A runner killed in its run lock is covered in test/store/lock-holder.test.ts.
  for (const name of ['ledger.json']) {
    it(`killed inside the ${name} lock: the next server launches and reads status at once`, async () => {
      const dying = await startServer({ ...env, SUBAGENTS_TEST_FAULT: `kill-in-lock:${name}` });
      // The server dies under the call.
      await dying.call('launch', { agent: 'echo', task: 'dies holding a lock' }).catch((e: Error) => e);
      expect(await until(() => lockDirs(t.home).some((p) => path.basename(p) === `${name}.lock`), 10_000)).toBe(true);
      await dying.close();

      const next = await startServer(env);
      try {
        const runs = sc(await next.call('status', {}));
        expect(runs).toBeTruthy();
        for (const id of fs.readdirSync(path.join(t.home, 'runs')).filter((d) => !d.startsWith('.'))) {
          const st = await next.call('status', { runId: id });
          expect(textOf(st)).not.toMatch(/^BUSY/);
          // Cancelling writes the run's status under its lock (its runner, if it died in there, is cleared).
          const cancelled = await next.call('cancel', { runId: id });
          expect(textOf(cancelled)).not.toMatch(/^BUSY/);
        }
        const launched = await next.call('launch', { agent: 'echo', task: 'after the kill' });
        expect(textOf(launched)).not.toMatch(/^BUSY/);
        expect(launched.isError).toBeFalsy();
        expect((await waitTerminal(next, sc(launched).runId)).state).toBe('completed');
      } finally {
        await next.close();
      }
    }, 60_000);
  }
});
