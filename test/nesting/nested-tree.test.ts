import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, textOf, waitTerminal } from '../helpers/server.js';
import { DELEGATE, FAKE, liveRunProcesses, outputOf, readLedger, readRun, report, runIds, serversOn, until } from './tree-helpers.js';

/** The nesting variables the runner gives an agent (SPEC §4.8), plus the system prompt file of SPEC §3. */
const NESTING_VARS = ['SUBAGENTS_BUDGET', 'SUBAGENTS_DEPTH', 'SUBAGENTS_HOME', 'SUBAGENTS_PARENT_RUN_ID', 'SUBAGENTS_ROOT_RUN_ID', 'SUBAGENTS_RUN_TOKEN'];

describe('nested delegation through a real MCP client inside an agent', () => {
  let t: ReturnType<typeof tempStateHome>;
  const start = serversOn(() => t);
  const agents = (holdFile = path.join(t.base, 'never')) => {
    const dir = path.join(t.home, 'agents');
    writeAgent(dir, 'delegate', { backend: 'command', command: ['node', DELEGATE, 'delegate'] });
    writeAgent(dir, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    writeAgent(dir, 'env', { backend: 'command', command: ['node', FAKE, 'env'] });
    writeAgent(dir, 'hold', { backend: 'command', command: ['node', DELEGATE, 'hold', holdFile] });
    writeAgent(dir, 'stubborn', { backend: 'command', command: ['node', FAKE, 'ignore-term', '30000'] });
    // Outlives two kill graces in series however loaded the machine: it must be killed, never end on its own.
    writeAgent(dir, 'stubborn-long', { backend: 'command', command: ['node', FAKE, 'ignore-term', '600000'] });
  };

  it('lists nested runs as children, charges them to the tree budget and not to capacity, and passes exactly the nesting variables', async () => {
    t = tempStateHome();
    agents();
    const s = await start({ SUBAGENTS_MAX_ACTIVE_RUNS: '1', SUBAGENTS_DEFAULT_TIMEOUT_MS: '900000', SUBAGENTS_MAX_OUTPUT_BYTES: '2097152' });
    const plan = { launches: [{ agent: 'env', task: 'x' }, { tasks: [{ agent: 'echo', task: 'a' }, { agent: 'echo', task: 'b' }] }], wait: true };
    const l = await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    expect(l.isError, textOf(l)).toBeFalsy();
    const rootId = sc(l).runId as string;
    const fin = await waitTerminal(s, rootId);
    expect(fin.state).toBe('completed');
    const rep = report(outputOf(t.home, fin.runId));

    // The delegating agent itself: depth 1, in the root's tree, with exactly the nesting variables.
    expect(rep.env.SUBAGENTS_DEPTH).toBe('1');
    expect(rep.env.SUBAGENTS_PARENT_RUN_ID).toBe(rootId);
    expect(rep.env.SUBAGENTS_ROOT_RUN_ID).toBe(rootId);
    expect(rep.env.SUBAGENTS_BUDGET!.length).toBeGreaterThanOrEqual(22);
    expect(Object.keys(rep.env).filter((k) => k !== 'SUBAGENTS_SYSTEM_PROMPT_FILE').sort()).toEqual(NESTING_VARS);

    // Both nested launches admitted although the cap of 1 active run is full: they are not charged to capacity.
    expect(rep.results.map((r) => r.isError)).toEqual([false, false]);
    for (const r of rep.results) expect(r.structured.capacity.active).toBe(1);
    expect(Math.max(...rep.results.map((r) => r.structured.fanout.used))).toBe(4);
    expect(rep.finals.map((f) => f.state)).toEqual(['completed', 'completed']);

    // The nested agent: depth 2, the same root, its own parent, no session id, roots or limits.
    const childEnv = JSON.parse(outputOf(t.home, rep.finals[0].runId)).env as Record<string, string>;
    const childIds = rep.results.map((r) => r.structured.runId as string);
    expect(childEnv.SUBAGENTS_DEPTH).toBe('2');
    expect(childEnv.SUBAGENTS_ROOT_RUN_ID).toBe(rootId);
    expect(childEnv.SUBAGENTS_PARENT_RUN_ID).toBe(childIds[0]);
    expect(childEnv.SUBAGENTS_BUDGET).not.toBe(rep.env.SUBAGENTS_BUDGET);
    expect(Object.keys(childEnv).filter((k) => k.startsWith('SUBAGENTS_') && k !== 'SUBAGENTS_SYSTEM_PROMPT_FILE').sort()).toEqual(NESTING_VARS);
    expect(Object.keys(childEnv).some((k) => /SESSION|ROOTS|MAX_/.test(k))).toBe(false);

    // The parent's status lists them under the step that launched them; the top-level server can read them.
    expect([...fin.steps[0].children].sort()).toEqual([...childIds].sort());
    for (const id of childIds) {
      const { record } = readRun(t.home, id);
      expect(record.depth).toBe(1);
      expect(record.rootRunId).toBe(rootId);
      expect(record.parentRunId).toBe(rootId);
      // The operator's settings reach nested runs through the tree, not through the agent's environment.
      expect(record.defaultStepTimeoutMs).toBe(900000);
      expect(record.maxOutputBytes).toBe(2097152);
      expect(record.killGraceMs).toBe(300);
      const st = await s.call('status', { runId: id });
      expect(st.isError, textOf(st)).toBeFalsy();
      expect(sc(st).state).toBe('completed');
    }
    expect(fin.fanout.used).toBe(4);

    // Every slot and claim comes back once the tree has ended.
    await until(() => { const l2 = readLedger(t.home); return !Object.keys(l2.roots).length && !Object.keys(l2.trees).length && !Object.keys(l2.agents).length; }, 'an empty ledger');
  });

  it('refuses DEPTH_EXCEEDED at the tree limit, whatever the nested server environment says', async () => {
    t = tempStateHome();
    agents();
    const s = await start({ SUBAGENTS_MAX_DEPTH: '2' });
    // Both nested servers are told a larger limit: the tree's recorded limit (the root server's 2) must win.
    const serverEnv = { SUBAGENTS_MAX_DEPTH: '9' };
    const inner = { launches: [{ agent: 'echo', task: 'too deep' }], wait: true, serverEnv };
    const plan = { launches: [{ agent: 'delegate', task: JSON.stringify(inner) }], wait: true, serverEnv };
    const l = await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    const fin = await waitTerminal(s, sc(l).runId);
    expect(fin.state).toBe('completed');
    const rep = report(outputOf(t.home, fin.runId));
    expect(rep.results[0]!.isError).toBe(false);
    const innerRep = report(outputOf(t.home, rep.finals[0].runId));
    expect(innerRep.env.SUBAGENTS_DEPTH).toBe('2');
    expect(innerRep.results[0]!.isError).toBe(true);
    expect(innerRep.results[0]!.text).toMatch(/^DEPTH_EXCEEDED: .*depth 2.*depth 3/);
    expect(readRun(t.home, rep.finals[0].runId).record.limits.maxDepth).toBe(2);
    // Refused before anything was written: the root and the one nested run only.
    expect(runIds(t.home)).toHaveLength(2);
  });

  it('cancelling the root ends every descendant run and leaves no process of any of them', async () => {
    t = tempStateHome();
    agents();
    const s = await start();
    const inner = { launches: [{ agent: 'hold', task: 'grandchild' }, { agent: 'stubborn', task: 'grandchild 2' }], wait: true };
    const plan = { launches: [{ agent: 'delegate', task: JSON.stringify(inner) }, { agent: 'hold', task: 'child' }], wait: true };
    const l = await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    const rootId = sc(l).runId as string;
    // Root, nested delegate, hold child, two grandchildren: all with a running agent.
    await until(() => {
      const ids = runIds(t.home);
      return ids.length === 5 && ids.every((id) => { try { return readRun(t.home, id).status.steps[0].state === 'running'; } catch { return false; } });
    }, 'five runs with running agents');
    const c = await s.call('cancel', { runId: rootId });
    expect(c.isError, textOf(c)).toBeFalsy();
    expect(sc(c).state).toBe('cancelled');
    await until(() => runIds(t.home).every((id) => ['cancelled', 'failed', 'completed'].includes(readRun(t.home, id).status.state)), 'every run of the tree terminal');
    for (const id of runIds(t.home)) expect(readRun(t.home, id).status.state, JSON.stringify(readRun(t.home, id).status)).toBe('cancelled');
    await until(() => liveRunProcesses(t.home).length === 0, 'no process of any run of the tree', 10_000);
    await until(() => Object.keys(readLedger(t.home).agents).length === 0 && Object.keys(readLedger(t.home).roots).length === 0, 'all slots back');
  });

  it('cancels nested runs whose launching agent exits (PARENT_ENDED) and holds the root slot until the whole tree ended', async () => {
    t = tempStateHome();
    agents();
    const s = await start({ SUBAGENTS_MAX_ACTIVE_RUNS: '1' });
    // The child ignores SIGTERM: it outlives its parent agent by the kill grace.
    const plan = { launches: [{ agent: 'stubborn', task: 'outlive my parent' }], wait: false };
    const l = await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    const rootId = sc(l).runId as string;
    let violations = 0;
    let childId: string | undefined;
    let sampling = true;
    const observer = (async () => {
      while (sampling) {
        childId ??= runIds(t.home).find((id) => id !== rootId);
        if (childId) {
          let childActive = false;
          try { childActive = !['cancelled', 'failed', 'completed'].includes(readRun(t.home, childId).status.state); } catch { /* being written */ }
          if (childActive && !readLedger(t.home).roots[rootId]) violations++;
        }
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    const fin = await waitTerminal(s, rootId);
    sampling = false;
    await observer;
    expect(fin.state).toBe('completed');
    expect(childId).toBeDefined();
    const child = readRun(t.home, childId!).status;
    expect(child.state).toBe('cancelled');
    expect(child.error.code).toBe('PARENT_ENDED');
    expect(Date.parse(child.endedAt)).toBeLessThanOrEqual(Date.parse(fin.endedAt));
    expect(fin.steps[0].children).toEqual([childId]);
    expect(violations).toBe(0);
    await until(() => liveRunProcesses(t.home).length === 0, 'no process left');
    // The slot is back: a new top-level launch fits the cap of 1.
    await until(() => Object.keys(readLedger(t.home).roots).length === 0, 'the root slot back');
    const again = await s.call('launch', { agent: 'echo', task: 'next' });
    expect(again.isError, textOf(again)).toBeFalsy();
    await waitTerminal(s, sc(again).runId);
  });

  it('a step waits for a deep tree of SIGTERM-ignoring agents however long the grace, and the root keeps its slot until the last nested run ended', async () => {
    t = tempStateHome();
    agents();
    // Two levels that each wait out the grace (the child's agent, then the grandchild's): past the grace + 5 s the
    // parent step once waited before ending anyway, which freed the root's slot with nested runs still going.
    const s = await start({ SUBAGENTS_KILL_GRACE_MS: '6000', SUBAGENTS_MAX_ACTIVE_RUNS: '1' });
    const release = path.join(t.base, 'release');
    const inner = { launches: [{ agent: 'stubborn-long', task: 'grandchild' }], wait: false, ignoreTerm: true, sleepMs: 120_000 };
    const plan = { launches: [{ agent: 'delegate', task: JSON.stringify(inner) }], wait: false, holdFile: release };
    const l = await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    expect(l.isError, textOf(l)).toBeFalsy();
    const rootId = sc(l).runId as string;
    const nested = () => runIds(t.home).filter((id) => id !== rootId);
    await until(() => nested().length === 2 && nested().every((id) => { try { return readRun(t.home, id).status.steps[0].state === 'running'; } catch { return false; } }), 'the child and the grandchild with running agents');
    let violations = 0;
    let samples = 0;
    let sampling = true;
    const observer = (async () => {
      while (sampling) {
        const active = nested().some((id) => { try { return !['cancelled', 'failed', 'completed'].includes(readRun(t.home, id).status.state); } catch { return true; } });
        if (active) { samples++; if (!readLedger(t.home).roots[rootId]) violations++; }
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    // The root's agent exits: its step cancels the child (PARENT_ENDED), whose step cancels the grandchild.
    fs.writeFileSync(release, '');
    const fin = await waitTerminal(s, rootId, 90_000);
    // Sampled until the last nested run has ended, past the root's own end.
    await until(() => nested().every((id) => ['cancelled', 'failed', 'completed'].includes(readRun(t.home, id).status.state)), 'every nested run terminal', 60_000);
    sampling = false;
    await observer;
    expect(fin.state).toBe('completed');
    expect(samples).toBeGreaterThan(0);
    expect(violations).toBe(0);
    const [child, grandchild] = [...nested()].sort((a, b) => readRun(t.home, a).record.depth - readRun(t.home, b).record.depth).map((id) => readRun(t.home, id).status);
    const story = nested().map((id) => `${id}: ${fs.readFileSync(path.join(t.home, 'runs', id, 'events.jsonl'), 'utf8')}\n${fs.readFileSync(path.join(t.home, 'runs', id, 'runner.log'), 'utf8')}`).join('\n');
    for (const st of [child!, grandchild!]) {
      expect(st.state, story).toBe('cancelled');
      expect(st.error.code, story).toBe('PARENT_ENDED');
      expect(Date.parse(st.endedAt)).toBeLessThanOrEqual(Date.parse(fin.endedAt));
    }
    // The grandchild's agent waited out the whole grace: it was killed, not asked.
    expect(grandchild!.steps[0].signal, story).toBe('SIGKILL');
    await until(() => liveRunProcesses(t.home).length === 0, 'no process left');
    await until(() => Object.keys(readLedger(t.home).roots).length === 0, 'the root slot back');
    const again = await s.call('launch', { agent: 'echo', task: 'next' });
    expect(again.isError, textOf(again)).toBeFalsy();
    await waitTerminal(s, sc(again).runId);
  }, 120_000);

  it('a run whose warm runner was booted by a server inside another run\'s agent outlives that agent, and is not taken for its escapee', async () => {
    t = tempStateHome();
    const release = path.join(t.base, 'release');
    agents(release);
    // Only the agent's own server boots idle runners: X can only get one of those (a descendant of the root's agent
    // by parent links, carrying no run token). Its forged budget makes that server top-level, with its own pool.
    const s = await start({ SUBAGENTS_WARM_RUNNERS: '0' });
    const go = path.join(t.base, 'go');
    const plan = { launches: [{ agent: 'hold', task: 'x' }], wait: false, goFile: go, serverEnv: { SUBAGENTS_BUDGET: 'A'.repeat(43), SUBAGENTS_WARM_RUNNERS: '2' } };
    const l = await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    expect(l.isError, textOf(l)).toBeFalsy();
    const rootId = sc(l).runId as string;
    const warmDir = path.join(t.home, 'warm');
    const idlePids = () => { try { return fs.readdirSync(warmDir).filter((n) => n.endsWith('.idle')).map((n) => Number(n.split('-')[0])); } catch { return []; } };
    await until(() => idlePids().length === 2, 'the agent\'s server booted its pool', 30_000);
    const booted = idlePids();
    fs.writeFileSync(go, '');
    const fin = await waitTerminal(s, rootId);
    expect(fin.state).toBe('completed');
    const [xId] = runIds(t.home).filter((id) => id !== rootId);
    expect(xId).toBeDefined();
    const x = readRun(t.home, xId!);
    expect(booted).toContain(x.status.runner.pid);
    // The root's agent and its server are gone; X's runner is not the root's escapee. (A replacement the agent's server
    // was still booting when the agent exited may be: nothing identifies it as a pool member before it announces.)
    expect((fin.escaped ?? []).map((p: { pid: number }) => p.pid)).not.toContain(x.status.runner.pid);
    expect(x.status.state).toBe('running');
    fs.writeFileSync(release, '');
    // X is the inner server's session's, not this client's: read from its files.
    await until(() => readRun(t.home, xId!).status.state !== 'running', 'X ended');
    expect(readRun(t.home, xId!).status.state).toBe('completed');
    await until(() => liveRunProcesses(t.home).length === 0, 'no process left');
  });

  it('refuses a nested launch beyond SUBAGENTS_MAX_AGENTS at once, exactly (never queued)', async () => {
    t = tempStateHome();
    const release = path.join(t.base, 'release');
    agents(release);
    const s = await start({ SUBAGENTS_MAX_AGENTS: '2' });
    const resultsFile = path.join(t.base, 'results.json');
    // The delegate holds one slot of two: of three concurrent launches exactly one single fits.
    const plan = { launches: [{ agent: 'hold', task: 'a' }, { agent: 'hold', task: 'b' }, { tasks: [{ agent: 'hold', task: 'c' }, { agent: 'hold', task: 'd' }] }], wait: true, resultsFile };
    const l = await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    await until(() => fs.existsSync(resultsFile), 'the nested launches answered');
    const results = JSON.parse(fs.readFileSync(resultsFile, 'utf8')) as Array<{ isError: boolean; text: string }>;
    fs.writeFileSync(release, '');
    expect(results.filter((r) => !r.isError)).toHaveLength(1);
    expect(results[2]!.isError).toBe(true);
    for (const r of results.filter((x) => x.isError)) expect(r.text).toMatch(/^CAPACITY_EXHAUSTED: \d+ of 2 agent processes .*SUBAGENTS_MAX_AGENTS.*refused rather than queued/);
    const fin = await waitTerminal(s, sc(l).runId);
    expect(fin.state).toBe('completed');
    expect(runIds(t.home)).toHaveLength(2);
    // A refused batch claimed nothing: root 1 + the admitted single 1.
    expect(fin.fanout.used).toBe(2);
  });

  it.each(['before-ready', 'after-ready'])('a nested launch whose runner dies %s returns its fan-out claim and reserved agent slot', async (fault) => {
    t = tempStateHome();
    agents();
    // Exactly enough for the two root members and ONE nested agent, in budget and in agent slots: B's nested launch
    // fits only if A's failed one gave both back. A is still alive (its server too) when B launches, so no liveness
    // pruning can return A's reserved slot in its place.
    const s = await start({ SUBAGENTS_MAX_AGENTS: '3', SUBAGENTS_MAX_SPAWNS_PER_RUN: '3' });
    const aResults = path.join(t.base, 'a-results.json');
    const bResults = path.join(t.base, 'b-results.json');
    // The fault reaches only A's server (and so only the runner of A's nested launch).
    const a = { launches: [{ agent: 'echo', task: 'never starts' }], resultsFile: aResults, holdFile: bResults, serverEnv: { SUBAGENTS_TEST_FAULT: fault } };
    const b = { launches: [{ agent: 'echo', task: 'fits' }], goFile: aResults, resultsFile: bResults, wait: true };
    const l = await s.call('launch', { tasks: [{ agent: 'delegate', task: JSON.stringify(a) }, { agent: 'delegate', task: JSON.stringify(b) }], concurrency: 2 });
    expect(l.isError, textOf(l)).toBeFalsy();
    const rootId = sc(l).runId as string;
    const fin = await waitTerminal(s, rootId, 90_000);
    expect(fin.state).toBe('completed');
    const [repA, repB] = [0, 1].map((m) => report(fs.readFileSync(path.join(t.home, 'runs', rootId, 'out', `0.${m}.txt`), 'utf8')));
    expect(repA!.results[0]!.isError).toBe(true);
    expect(repA!.results[0]!.text).toMatch(/^HANDSHAKE_FAILED: .*No agent was started and nothing is held/);
    expect(repB!.results[0]!.isError, repB!.results[0]!.text).toBe(false);
    expect(repB!.finals[0].state).toBe('completed');
    // A's launch is recorded failed; it started no agent and the tree paid only for agents that started.
    const failedId = runIds(t.home).find((id) => id !== rootId && id !== repB!.results[0]!.structured.runId)!;
    const failed = readRun(t.home, failedId).status;
    expect(failed.state).toBe('failed');
    expect(failed.error.code).toBe('HANDSHAKE_FAILED');
    expect(failed.steps[0].startedAt).toBeNull();
    expect(runIds(t.home)).toHaveLength(3);
    expect(fin.fanout).toEqual({ used: 3, limit: 3, remaining: 0 });
    await until(() => { const x = readLedger(t.home); return !Object.keys(x.roots).length && !Object.keys(x.trees).length && !Object.keys(x.agents).length; }, 'an empty ledger');
  }, 120_000);

  it('an invalid or expired SUBAGENTS_BUDGET makes the server top-level', async () => {
    t = tempStateHome();
    agents();
    const s = await start();
    const l = await s.call('launch', { agent: 'env', task: 'x' });
    const fin = await waitTerminal(s, sc(l).runId);
    const given = JSON.parse(outputOf(t.home, fin.runId)).env as Record<string, string>;
    const nestingEnv = Object.fromEntries(NESTING_VARS.map((k) => [k, given[k]!]));
    for (const budget of [given.SUBAGENTS_BUDGET!, 'A'.repeat(43)]) {
      // Expired (its step ended), then forged: either way the server is top-level.
      const n = await start({ ...nestingEnv, SUBAGENTS_BUDGET: budget });
      const r = await n.call('launch', { agent: 'echo', task: 'hi' });
      expect(r.isError, textOf(r)).toBeFalsy();
      const id = sc(r).runId as string;
      expect(sc(r).capacity.active).toBe(1);
      const { record } = readRun(t.home, id);
      expect(record.depth).toBe(0);
      expect(record.parentRunId).toBeNull();
      expect(record.rootRunId).toBe(id);
      await waitTerminal(n, id);
    }
    // children/ is made by a run's first nested launch: none here.
    expect(fs.existsSync(path.join(t.home, 'runs', sc(l).runId, 'children'))).toBe(false);
  });
});
