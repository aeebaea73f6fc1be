import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { FAKE, identityOf, ledger, pidsMentioning, readJson, stillRunning, TREE, until } from './support.js';

describe('sessions are isolated: another session\'s run answers exactly like a run that does not exist', () => {
  let t: ReturnType<typeof tempStateHome>;
  let a: Started;
  let b: Started;
  beforeAll(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '30000'] });
    [a, b] = await Promise.all([
      startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' }, { name: 'client-a' }),
      startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' }, { name: 'client-b' }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([a.close(), b.close()]);
    t.cleanup();
  });

  it('status, cancel, dismiss, append and resources of session B cannot see or touch session A\'s run', async () => {
    const l = sc(await a.call('launch', { agent: 'sleeper', task: 'session A work' }));
    expect(l.sessionId).not.toBe(sc(await b.call('status', {})).sessionId);
    const ghost = `r-${'Q'.repeat(24)}`;
    const same = (text: string, id: string) => text.split(id).join('<id>');
    const calls: Array<[string, (id: string) => Record<string, unknown>]> = [
      ['status', (id) => ({ runId: id })],
      ['status', (id) => ({ runId: id, waitMs: 500 })],
      ['cancel', (id) => ({ runId: id })],
      ['dismiss', (id) => ({ runId: id, cancel: true })],
      ['append', (id) => ({ runId: id, step: { agent: 'sleeper', task: 'x' } })],
    ];
    for (const [tool, args] of calls) {
      const foreign = await b.call(tool, args(l.runId));
      const missing = await b.call(tool, args(ghost));
      expect(foreign.isError, tool).toBe(true);
      expect(textOf(foreign), tool).toMatch(/^RUN_NOT_FOUND: /);
      expect(same(textOf(foreign), l.runId), tool).toBe(same(textOf(missing), ghost));
    }
    const listB = sc(await b.call('status', { all: true }));
    expect(listB.runs).toEqual([]);
    expect((await b.client.listResources()).resources.map((r) => r.uri).join()).not.toContain(l.runId);
    const readForeign = await b.client.readResource({ uri: `subagents://runs/${l.runId}` }).then(() => 'read', (e: Error) => e.message);
    const readMissing = await b.client.readResource({ uri: `subagents://runs/${ghost}` }).then(() => 'read', (e: Error) => e.message);
    expect(same(readForeign, l.runId)).toBe(same(readMissing, ghost));

    // B's attempts changed nothing: A's run is still running and not dismissed.
    const mine = sc(await a.call('status', { runId: l.runId }));
    expect(mine.state).toBe('running');
    expect(mine.dismissed).toBe(false);
    expect(fs.existsSync(path.join(t.home, 'runs', l.runId, 'cancel-request.json'))).toBe(false);
    expect(sc(await a.call('cancel', { runId: l.runId })).state).toBe('cancelled');
  });
});

describe('cancel: group SIGTERM, grace, SIGKILL, verified gone', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome();
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'stubborn', { backend: 'command', command: ['node', TREE, path.join(t.base, 'stubborn'), 'ignore-term'] });
    writeAgent(agents, 'escaper', { backend: 'command', command: ['node', TREE, path.join(t.base, 'escaper'), 'detached'] });
    writeAgent(agents, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
  });
  afterAll(async () => {
    await s.close();
    t.cleanup();
  });

  /** Launches a tree agent and returns the identities of its runner, agent and grandchild once all exist. */
  async function launchTree(agent: string): Promise<{ runId: string; runner: { pid: number; startTime: string }; agentId: { pid: number; startTime: string }; grandchild: { pid: number; startTime: string } }> {
    const dir = path.join(t.base, agent);
    fs.rmSync(dir, { recursive: true, force: true }); // markers of an earlier run of the same agent
    const l = sc(await s.call('launch', { agent, task: 'grow a tree' }));
    expect(await until(() => fs.existsSync(path.join(dir, 'grandchild.pid')) && fs.existsSync(path.join(dir, 'agent.pid')))).toBe(true);
    const st = sc(await s.call('status', { runId: l.runId }));
    return {
      runId: l.runId,
      runner: identityOf(st.runnerPid)!,
      agentId: identityOf(Number(fs.readFileSync(path.join(dir, 'agent.pid'), 'utf8')))!,
      grandchild: identityOf(Number(fs.readFileSync(path.join(dir, 'grandchild.pid'), 'utf8')))!,
    };
  }

  it('an agent (and its grandchild) ignoring SIGTERM are SIGKILLed after the grace; nothing of the run is left', async () => {
    const r = await launchTree('stubborn');
    for (const id of [r.runner, r.agentId, r.grandchild]) expect(id).not.toBeNull();
    const c = await s.call('cancel', { runId: r.runId });
    expect(c.isError, textOf(c)).toBeFalsy();
    expect(sc(c)).toMatchObject({ runId: r.runId, state: 'cancelled', error: { code: 'CANCELLED' }, survivors: [] });
    for (const id of [r.runner, r.agentId, r.grandchild]) expect(stillRunning(id), String(id.pid)).toBe(false);
    const token = readJson(path.join(t.home, 'runs', r.runId, 'run.json')).runToken as string;
    expect(pidsMentioning(token)).toEqual([]);
    const st = sc(await s.call('status', { runId: r.runId }));
    expect(st.state).toBe('cancelled');
    expect(st.steps[0].state).toBe('cancelled');
    expect(st.steps[0].signal).toBe('SIGKILL'); // SIGTERM was ignored: only the escalation stopped it
    expect(ledger(t.home).roots).toEqual({});
    expect(Object.keys(ledger(t.home).agents)).toEqual([]);
  });

  it('a grandchild that left the process group is found by its run token and stopped; the agent dies of SIGTERM', async () => {
    const r = await launchTree('escaper');
    const gc = fs.readFileSync(`/proc/${r.grandchild.pid}/stat`, 'utf8');
    const pgid = Number(gc.slice(gc.lastIndexOf(')') + 2).split(' ')[2]);
    expect(pgid).not.toBe(r.runner.pid); // it really left the run's group
    const c = sc(await s.call('cancel', { runId: r.runId }));
    expect(c.state).toBe('cancelled');
    expect(c.survivors).toEqual([]);
    for (const id of [r.runner, r.agentId, r.grandchild]) expect(stillRunning(id), String(id.pid)).toBe(false);
    const st = sc(await s.call('status', { runId: r.runId }));
    expect(st.steps[0].signal).toBe('SIGTERM');
  });

  it('cancel is idempotent, and a finished run answers with the state it reached', async () => {
    const r = await launchTree('stubborn');
    const first = sc(await s.call('cancel', { runId: r.runId }));
    const second = sc(await s.call('cancel', { runId: r.runId }));
    expect(second).toEqual(first);
    const done = sc(await s.call('launch', { agent: 'echo', task: 'quick' }));
    await waitTerminal(s, done.runId);
    const c = sc(await s.call('cancel', { runId: done.runId }));
    expect(c).toMatchObject({ state: 'completed', error: null, survivors: [] });
  });
});
