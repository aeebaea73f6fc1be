import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { until } from '../nesting/tree-helpers.js';
import { WAIT_FOR_FILE_AGENT } from '../capacity/capacity-helpers.js';
import { queueLedger, stepStarts } from './queue-helpers.js';
import { cli, cliEnv } from '../cli/helpers.js';

/** Queued launches (docs/limits.md, "The queue") through a real server, real runners and a file-waiting agent. */
describe('a full home queues launches', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  const gate = (name: string) => path.join(t.base, `release-${name}`);
  beforeAll(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'wait', { backend: 'command', command: WAIT_FOR_FILE_AGENT });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_ACTIVE_RUNS: '1', SUBAGENTS_MAX_QUEUED: '2', SUBAGENTS_MAX_TIMEOUT_MS: '600000' });
  });
  afterAll(async () => {
    for (const n of ['a', 'b', 'c', 'd']) fs.writeFileSync(gate(n), '');
    await s.close();
    t.cleanup();
  });

  it('refuses malformed queue options with INVALID_INPUT', async () => {
    for (const bad of [{ queue: 'yes' }, { queueTimeoutMs: -5 }, { queueTimeoutMs: 1.5 }, { queueTimeoutMs: 'soon' }]) {
      const r = await s.call('launch', { agent: 'wait', task: gate('x'), ...bad });
      expect(r.isError).toBe(true);
      expect(textOf(r)).toMatch(/^INVALID_INPUT/);
    }
    const over = await s.call('launch', { agent: 'wait', task: gate('x'), queueTimeoutMs: 600_001 });
    expect(textOf(over)).toMatch(/^INVALID_INPUT: .*SUBAGENTS_MAX_TIMEOUT_MS/);
  });

  it('queues in order, shows positions, refuses past the bound or with queue: false, and starts the head when a slot frees', async () => {
    const a = sc(await s.call('launch', { agent: 'wait', task: gate('a') }));
    expect(a.state).toBe('running');
    const b = await s.call('launch', { agent: 'wait', task: gate('b') });
    expect(b.isError, textOf(b)).toBeFalsy();
    expect(sc(b)).toMatchObject({ state: 'queued', queue: { position: 1, length: 1 }, capacity: { active: 1, limit: 1 } });
    const c = sc(await s.call('launch', { agent: 'wait', task: gate('c') }));
    expect(c).toMatchObject({ state: 'queued', queue: { position: 2, length: 2 } });

    const refused = await s.call('launch', { agent: 'wait', task: gate('d'), queue: false });
    expect(textOf(refused)).toMatch(/^CAPACITY_EXHAUSTED: /);
    const full = await s.call('launch', { agent: 'wait', task: gate('d') });
    expect(textOf(full)).toMatch(/^CAPACITY_EXHAUSTED: .*queue holds 2 of 2/);

    // People see the queue too: runs and show name the position, doctor the queue's length and its oldest entry.
    const cliEnvHere = cliEnv({ SUBAGENTS_HOME: t.home, SUBAGENTS_MAX_QUEUED: '2' });
    const runs = JSON.parse((await cli(['runs', '--json'], cliEnvHere)).stdout);
    expect(runs.runs.find((r: { runId: string }) => r.runId === c.runId)).toMatchObject({ state: 'queued', queue: { position: 2, length: 2 } });
    expect((await cli(['runs', '--state', 'queued'], cliEnvHere)).stdout).toMatch(/queued 1\/2/);
    expect((await cli(['show', c.runId], cliEnvHere)).stdout).toMatch(/queued \(position 2 of 2 in the queue\)/);
    const doctor = (await cli(['doctor'], cliEnvHere)).stdout;
    expect(doctor).toMatch(/queue now: 2 of 2 launches waiting, the oldest for \d+ s/);
    expect(doctor).toMatch(/SUBAGENTS_MAX_QUEUED\s+env\s+2/);
    expect(doctor).toMatch(/SUBAGENTS_QUEUE_TIMEOUT_MS\s+default\s+3600000/);

    const bStatus = sc(await s.call('status', { runId: sc(b).runId }));
    expect(bStatus).toMatchObject({ state: 'queued', queue: { position: 1, length: 2 } });
    const list = sc(await s.call('status', {}));
    expect(list.capacity).toEqual({ active: 1, limit: 1, queued: 2 });
    expect(list.runs.find((r: { runId: string }) => r.runId === c.runId).queue).toEqual({ position: 2, length: 2 });

    // The slot of A is handed to B by A's runner as it ends; a wait on B wakes on its start.
    fs.writeFileSync(gate('a'), '');
    const woke = sc(await s.call('status', { runId: sc(b).runId, waitMs: 30_000 }));
    expect(woke.changed).toBe(true);
    await until(() => {
      const st = JSON.parse(fs.readFileSync(path.join(t.home, 'runs', sc(b).runId, 'status.json'), 'utf8')).state;
      return st === 'running';
    }, 'B running', 30_000);
    expect(sc(await s.call('status', { runId: c.runId })).queue).toEqual({ position: 1, length: 1 });

    // Cancelling a queued run ends it at once and returns its claims.
    const cancelled = sc(await s.call('cancel', { runId: c.runId }));
    expect(cancelled).toMatchObject({ state: 'cancelled', error: { code: 'CANCELLED' } });
    expect(queueLedger(t.home).queue).toEqual({});
    expect(queueLedger(t.home).trees[c.runId]).toBeUndefined();

    fs.writeFileSync(gate('b'), '');
    expect((await waitTerminal(s, sc(b).runId)).state).toBe('completed');
    expect(stepStarts(t.home, sc(b).runId)).toBe(1);
    await until(() => Object.keys(queueLedger(t.home).roots).length === 0, 'every slot back');
  });

  it('a run that waits past its queue timeout ends failed/QUEUE_TIMEOUT, and dismiss { cancel } of a queued run works', async () => {
    fs.rmSync(gate('a'), { force: true });
    const a = sc(await s.call('launch', { agent: 'wait', task: gate('a') }));
    expect(a.state, JSON.stringify(queueLedger(t.home))).toBe('running');
    const late = sc(await s.call('launch', { agent: 'wait', task: gate('b'), queueTimeoutMs: 300 }));
    expect(late.state).toBe('queued');
    const d = sc(await s.call('launch', { agent: 'wait', task: gate('d') }));
    expect(d.queue).toEqual({ position: 2, length: 2 });
    const ended = await waitTerminal(s, late.runId);
    expect(ended).toMatchObject({ state: 'failed', error: { code: 'QUEUE_TIMEOUT' } });
    expect(sc(await s.call('status', { runId: d.runId })).queue).toEqual({ position: 1, length: 1 });
    const dismissed = sc(await s.call('dismiss', { runId: d.runId, cancel: true }));
    expect(dismissed).toMatchObject({ state: 'cancelled', dismissed: true, cancelled: true });
    fs.writeFileSync(gate('a'), '');
    expect((await waitTerminal(s, a.runId)).state).toBe('completed');
    await until(() => Object.keys(queueLedger(t.home).roots).length === 0 && Object.keys(queueLedger(t.home).queue).length === 0, 'ledger empty');
    expect(stepStarts(t.home, late.runId)).toBe(0);
  });

  it('a damaged ledger is rebuilt with its queue: the queued run keeps its place and still starts', async () => {
    for (const n of ['a', 'b']) fs.rmSync(gate(n), { force: true });
    const a = sc(await s.call('launch', { agent: 'wait', task: gate('a') }));
    expect(a.state).toBe('running');
    const b = sc(await s.call('launch', { agent: 'wait', task: gate('b') }));
    expect(b.state).toBe('queued');
    fs.writeFileSync(path.join(t.home, 'ledger.json'), '{ torn', { mode: 0o600 });
    expect(sc(await s.call('status', { runId: b.runId })).queue).toEqual({ position: 1, length: 1 });
    fs.writeFileSync(gate('b'), '');
    fs.writeFileSync(gate('a'), '');
    expect((await waitTerminal(s, b.runId)).state).toBe('completed');
    expect(stepStarts(t.home, b.runId)).toBe(1);
  });
});
