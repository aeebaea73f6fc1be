/**
 * F11 — a descendant that leaves both the run's process group and its run token:
 * `( setsid env -u SUBAGENTS_RUN_TOKEN sh -c 'sleep …' & )`. Neither the group nor the token reaches it, and the
 * double fork re-parents it to init at once. It used to outlive the run (completed or cancelled) with the status
 * saying `survivors: []`.
 * Expect: the runner finds it — by the agent's stdout/stderr it still holds, or, when it redirected them, by the
 * agent's process tree sampled while it was still attached — stops it, and reports it in the run's full status as
 * escaped with its pid and command.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { launchOk, pidAlive, pidsWithArg, until, sleep } from './fault-helpers.js';

describe.skipIf(process.platform !== 'linux')('F11 descendants that escape the group and the token', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  // A sleep duration no other process on the machine uses: the escaped process is found by its command line.
  const mark = `287.${process.pid}${Math.floor(Math.random() * 1000)}`;
  beforeEach(async () => {
    t = tempStateHome();
    const dir = path.join(t.home, 'agents');
    // Double fork: the escaped sleep is init's child at once, still holding the agent's stdout and stderr.
    writeAgent(dir, 'escape', { backend: 'command', command: ['sh', '-c', `( setsid env -u SUBAGENTS_RUN_TOKEN sh -c 'sleep ${mark}' & ); echo started`] });
    writeAgent(dir, 'escape-linger', { backend: 'command', command: ['sh', '-c', `( setsid env -u SUBAGENTS_RUN_TOKEN sh -c 'sleep ${mark}' & ); echo started; sleep 60`] });
    // Stdio redirected: only the sampled tree (it stays the agent's child for a while) knows it.
    writeAgent(dir, 'escape-quiet', { backend: 'command', command: ['sh', '-c', `setsid env -u SUBAGENTS_RUN_TOKEN sleep ${mark} </dev/null >/dev/null 2>&1 & sleep 2.5; echo done`] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
  });
  afterEach(async () => {
    for (const pid of pidsWithArg(`sleep ${mark}`)) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
    await s.close();
    t.cleanup();
  });

  const escapedOf = (fin: Record<string, any>) => (fin.escaped ?? []) as Array<{ pid: number; command: string }>;

  it('after completion: found through the stdio it holds, stopped, reported with pid and command', async () => {
    const runId = await launchOk(s, { agent: 'escape', task: 'go' });
    const fin = await waitTerminal(s, runId);
    expect(fin.state).toBe('completed');
    const escaped = escapedOf(fin);
    // The sleep, and the `sh -c` around it where the shell forks rather than execs its last command.
    expect(escaped.map((p) => p.command), JSON.stringify(fin)).toContain(`sleep ${mark}`);
    for (const p of escaped) expect(p.command).toMatch(new RegExp(`sleep ${mark.replace('.', '\\.')}$`));
    for (const p of escaped) expect(pidAlive(p.pid)).toBe(false);
    expect(pidsWithArg(`sleep ${mark}`)).toEqual([]);
  }, 60_000);

  it('after cancel: the same', async () => {
    const runId = await launchOk(s, { agent: 'escape-linger', task: 'go' });
    expect(await until(() => pidsWithArg(`sleep ${mark}`).length >= 1, 15_000)).toBe(true);
    const c = await s.call('cancel', { runId });
    expect(c.isError, textOf(c)).toBeFalsy();
    const fin = await waitTerminal(s, runId);
    expect(fin.state).toBe('cancelled');
    expect(escapedOf(fin).map((p) => p.command)).toContain(`sleep ${mark}`);
    expect(await until(() => pidsWithArg(`sleep ${mark}`).length === 0, 5_000)).toBe(true);
  }, 60_000);

  it('with its stdio redirected: found from the agent tree sampled while it was attached', async () => {
    const runId = await launchOk(s, { agent: 'escape-quiet', task: 'go' });
    const fin = await waitTerminal(s, runId);
    expect(fin.state).toBe('completed');
    expect(escapedOf(fin).map((p) => p.command)).toEqual([`sleep ${mark}`]);
    await sleep(100);
    expect(pidsWithArg(`sleep ${mark}`)).toEqual([]);
    const full = sc(await s.call('status', { runId }));
    expect(full.escaped[0].pid).toBeGreaterThan(0);
    // Listings stay short: the record is in the run's full status and its files only.
    const list = JSON.stringify(await s.call('status', {}));
    expect(list).not.toContain(`sleep ${mark}`);
    expect(fs.readFileSync(path.join(t.home, 'runs', runId, 'events.jsonl'), 'utf8')).toContain('"type":"escaped"');
  }, 60_000);
});
