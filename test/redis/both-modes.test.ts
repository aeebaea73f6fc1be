/**
 * The same contract cases against a local server and against a server in distributed mode (a private redis-server and
 * one worker standing in for another machine), so the two implementations cannot drift: each case runs once per mode
 * and asserts the same answers (docs/scale-out.md: "What a run is does not change").
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { CallToolResultSchema, CreateTaskResultSchema, LoggingMessageNotificationSchema, McpError, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INVALID_INPUT_CASES } from '../helpers/invalid-input.js';
import { FIXTURE_AGENTS, MAIN_JS } from '../helpers/paths.js';
import { REDIS_SERVER, startRedis, type RedisInstance } from '../helpers/redis-server.js';
import { skipWithout } from '../helpers/system-tools.js';

const skipped = skipWithout('redis-server', REDIS_SERVER !== null);
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

function writeAgents(home: string, gate: string): void {
  const dir = path.join(home, 'agents');
  writeAgent(dir, 'gated', { backend: 'command', command: ['node', FAKE, 'gate', gate] });
  writeAgent(dir, 'watched', { backend: 'command', command: ['node', FAKE, 'gate', `${gate}-watched`] });
  writeAgent(dir, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
  writeAgent(dir, 'fails', { backend: 'command', command: ['node', FAKE, 'exit', '3'] });
  writeAgent(dir, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
  writeAgent(dir, 'peers3', { backend: 'command', command: ['node', FAKE, 'peers', `${gate}-peers3`] });
  writeAgent(dir, 'peers4', { backend: 'command', command: ['node', FAKE, 'peers', `${gate}-peers4`] });
  writeAgent(dir, 'flood20k', { backend: 'command', command: ['node', FAKE, 'flood', '20000'] });
  writeAgent(dir, 'nap', { backend: 'command', command: ['node', FAKE, 'sleep', '2500'] });
  writeAgent(dir, 'held4', { backend: 'command', command: ['node', FAKE, 'gate', `${gate}-held4`] });
  writeAgent(dir, 'held5', { backend: 'command', command: ['node', FAKE, 'gate', `${gate}-held5`] });
  writeAgent(dir, 'flood', { backend: 'command', command: ['node', FAKE, 'flood', '4500000'] });
  writeAgent(dir, 'held', { backend: 'command', command: ['node', FAKE, 'gate', `${gate}-held`] });
  writeAgent(dir, 'held2', { backend: 'command', command: ['node', FAKE, 'gate', `${gate}-held2`] });
  writeAgent(dir, 'held3', { backend: 'command', command: ['node', FAKE, 'gate', `${gate}-held3`] });
  writeAgent(dir, 'delegate', { backend: 'command', command: ['node', path.join(FIXTURE_AGENTS, 'delegating-agent.mjs'), 'delegate'] });
}

let redis: RedisInstance;
let t: ReturnType<typeof tempStateHome>;
let worker: ChildProcess;
const modes: Record<'local' | 'redis', Started> = {} as Record<'local' | 'redis', Started>;
const homes: Record<'local' | 'redis', string> = {} as Record<'local' | 'redis', string>;
const extra: Started[] = [];

beforeAll(async () => {
  if (skipped) return;
  redis = await startRedis();
  t = tempStateHome('sa-modes-');
  const workerHome = path.join(t.base, 'worker');
  const localHome = path.join(t.base, 'local');
  const serverHome = path.join(t.base, 'server');
  for (const h of [workerHome, localHome, serverHome]) fs.mkdirSync(h, { mode: 0o700 });
  writeAgents(workerHome, path.join(t.base, 'gate-redis'));
  // The server's own copy of the agent files answers `agents` (docs/scale-out.md, "Differences from local mode").
  writeAgents(serverHome, path.join(t.base, 'gate-redis'));
  writeAgents(localHome, path.join(t.base, 'gate-local'));
  let log = '';
  worker = spawn(process.execPath, [MAIN_JS, 'worker', '--redis', redis.url, '--home', workerHome, '--root', t.root, '--concurrency', '4'], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, SUBAGENTS_STALL_INTERVAL_MS: '10000', SUBAGENTS_KILL_GRACE_MS: '1000' }, stdio: ['ignore', 'ignore', 'pipe'],
  });
  worker.stderr!.on('data', (c: Buffer) => { log += c; });
  const end = Date.now() + 20_000;
  while (!/worker w-/.test(log) && Date.now() < end && worker.exitCode === null) await new Promise((r) => setTimeout(r, 50));
  if (!/worker w-/.test(log)) throw new Error(`worker did not start: ${log}`);
  homes.local = localHome;
  homes.redis = serverHome;
  modes.local = await startServer({ SUBAGENTS_HOME: localHome, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '1000' });
  modes.redis = await startServer({ SUBAGENTS_HOME: serverHome, SUBAGENTS_ROOTS: t.root, SUBAGENTS_REDIS_URL: redis.url });
}, 60_000);

afterAll(async () => {
  await modes.local?.close();
  await modes.redis?.close();
  for (const e of extra) await e.close();
  if (worker && worker.exitCode === null) {
    const exited = new Promise((r) => worker.once('exit', r));
    worker.kill('SIGKILL');
    await exited;
  }
  await redis?.stop();
  t?.cleanup();
}, 30_000);

/**
 * Answers the local mode gave, by case: the Redis mode's case checks its own against them (the local block runs
 * first in this file), so a text that differs between the modes fails here, not in a user's hands.
 */
const localAnswers = new Map<string, unknown>();

describe.skipIf(skipped).each(['local', 'redis'] as const)('the contract in %s mode', (mode) => {
  const s = () => modes[mode];
  /** Records the local answer of `key`, or checks the Redis answer against it. */
  const sameInBothModes = (key: string, answer: unknown) => {
    if (mode === 'local') localAnswers.set(key, answer);
    else if (localAnswers.has(key)) expect(answer, key).toEqual(localAnswers.get(key));
  };
  /** A call that must be refused with `code`: isError, no structured content, the code first, no stack trace. */
  const refused = async (tool: string, args: Record<string, unknown>, code: string): Promise<string> => {
    const r = await s().call(tool, args);
    const text = textOf(r);
    const what = `${tool} ${JSON.stringify(args).slice(0, 120)} → ${text.slice(0, 200)}`;
    expect(r.isError, what).toBe(true);
    expect(r.structuredContent, what).toBeUndefined();
    expect(text.startsWith(`${code}: `), what).toBe(true);
    expect(text).not.toMatch(/\n\s+at /);
    return text;
  };

  it('single: completed with the agent\'s output, exit code and pid', async () => {
    const r = await s().call('launch', { agent: 'echo', task: 'same in both modes' });
    expect(r.isError, textOf(r)).toBeFalsy();
    expect(sc(r).runId).toMatch(/^r-/);
    expect(sc(r).fanout).toEqual({ used: 1, limit: 64, remaining: 63 });
    expect(sc(r).next).toContain('status');
    const fin = await waitTerminal(s(), sc(r).runId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('same in both modes');
    expect(fin.output.uri).toBe(`subagents://runs/${sc(r).runId}/output`);
    expect(fin.steps).toHaveLength(1);
    expect(fin.steps[0]).toMatchObject({ index: 0, agent: 'echo', state: 'completed', exitCode: 0 });
    expect(fin.steps[0].pid).toBeGreaterThan(0);
    expect(fin.error).toBeNull();
  }, 90_000);

  it('parallel: every member completed with its own output', async () => {
    const r = await s().call('launch', { tasks: [{ agent: 'echo', task: 'one' }, { agent: 'echo', task: 'two' }] });
    expect(r.isError, textOf(r)).toBeFalsy();
    expect(sc(r).steps.map((x: { agent: string }) => x.agent)).toEqual(['echo', 'echo']);
    const fin = await waitTerminal(s(), sc(r).runId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.steps.map((x: { output: { text: string } }) => x.output.text)).toEqual(['one', 'two']);
  }, 90_000);

  it('chain: {previous} carries the previous step\'s output', async () => {
    const r = await s().call('launch', { chain: [{ agent: 'echo', task: 'first' }, { agent: 'echo', task: 'got: {previous}' }] });
    expect(r.isError, textOf(r)).toBeFalsy();
    const fin = await waitTerminal(s(), sc(r).runId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('got: first');
    expect(fin.steps.map((x: { state: string }) => x.state)).toEqual(['completed', 'completed']);
  }, 90_000);

  it('append: a step appended to a running chain runs after it, and its output is the chain\'s', async () => {
    const r = await s().call('launch', { chain: [{ agent: 'gated', task: 'first' }] });
    const runId = sc(r).runId as string;
    for (let i = 0; i < 40; i++) {
      const v = sc(await s().call('status', { runId, waitMs: 2000 }));
      if (v.state === 'running' && v.steps[0].state === 'running') break;
    }
    const a = await s().call('append', { runId, step: { agent: 'echo', task: 'after: {previous}' } });
    expect(a.isError, textOf(a)).toBeFalsy();
    expect(sc(a)).toMatchObject({ runId, stepIndex: 1, pendingAppends: 1 });
    fs.writeFileSync(path.join(t.base, `gate-${mode}`), '');
    const fin = await waitTerminal(s(), runId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('after: first');
    const notChain = await s().call('append', { runId: sc(await s().call('launch', { agent: 'echo', task: 'x' })).runId, step: { agent: 'echo', task: 'y' } });
    expect(textOf(notChain)).toMatch(/^NOT_A_CHAIN/);
    const ended = await s().call('append', { runId, step: { agent: 'echo', task: 'too late' } });
    expect(textOf(ended)).toMatch(/^RUN_NOT_ACTIVE/);
  }, 90_000);

  it('a failing agent: failed with STEP_FAILED and its exit code', async () => {
    const r = await s().call('launch', { agent: 'fails', task: 'x' });
    const fin = await waitTerminal(s(), sc(r).runId, 60_000);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('STEP_FAILED');
    expect(fin.steps[0].exitCode).toBe(3);
  }, 90_000);

  it('cancel: the run ends cancelled and the answer says so', async () => {
    const r = await s().call('launch', { agent: 'sleeper', task: 'x' });
    const runId = sc(r).runId as string;
    for (let i = 0; i < 40; i++) {
      const v = sc(await s().call('status', { runId, waitMs: 2000 }));
      if (v.state === 'running' && v.steps[0].pid) break;
    }
    const c = await s().call('cancel', { runId });
    expect(c.isError, textOf(c)).toBeFalsy();
    const fin = await waitTerminal(s(), runId, 30_000);
    expect(fin.state).toBe('cancelled');
    expect(fin.error.code).toBe('CANCELLED');
  }, 90_000);

  it('resources: listed, subscribed (updated at the run\'s changes), and MCP Tasks over the same run', async () => {
    const updated: string[] = [];
    const { ResourceUpdatedNotificationSchema } = await import('@modelcontextprotocol/sdk/types.js');
    s().client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => { updated.push(n.params.uri); });
    const r = await s().call('launch', { agent: 'watched', task: 'watched' });
    const runId = sc(r).runId as string;
    const uri = `subagents://runs/${runId}`;
    await s().client.subscribeResource({ uri });
    const listed = await s().client.listResources();
    expect(listed.resources.map((x) => x.uri)).toContain(uri);
    const task = await s().client.request({ method: 'tasks/get', params: { taskId: runId } }, (await import('@modelcontextprotocol/sdk/types.js')).GetTaskResultSchema);
    expect(task.taskId).toBe(runId);
    expect(task.status).toBe('working');
    fs.writeFileSync(path.join(t.base, `gate-${mode}-watched`), '');
    await waitTerminal(s(), runId, 60_000);
    const end = Date.now() + 20_000;
    while (!updated.includes(uri) && Date.now() < end) await new Promise((res) => setTimeout(res, 50));
    expect(updated).toContain(uri);
    const done = await s().client.request({ method: 'tasks/get', params: { taskId: runId } }, (await import('@modelcontextprotocol/sdk/types.js')).GetTaskResultSchema);
    expect(done.status).toBe('completed');
    await s().client.unsubscribeResource({ uri });
  }, 90_000);

  it('queue: at a full home or pool a launch is queued with its place, and starts when the slot frees', async () => {
    const env: Record<string, string> = { SUBAGENTS_HOME: homes[mode], SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_ACTIVE_RUNS: '1', SUBAGENTS_KILL_GRACE_MS: '1000' };
    if (mode === 'redis') env.SUBAGENTS_REDIS_URL = redis.url;
    const one = await startServer(env);
    extra.push(one);
    const holder = sc(await one.call('launch', { agent: 'sleeper', task: 'holds the slot' })).runId as string;
    const q = await one.call('launch', { agent: 'echo', task: 'waited its turn' });
    expect(q.isError, textOf(q)).toBeFalsy();
    expect(sc(q).state).toBe('queued');
    expect(sc(q).queue).toEqual({ position: 1, length: 1 });
    const refused = await one.call('launch', { agent: 'echo', task: 'x', queue: false });
    expect(textOf(refused)).toMatch(/^CAPACITY_EXHAUSTED/);
    const queuedId = sc(q).runId as string;
    expect(sc(await one.call('status', { runId: queuedId })).queue).toEqual({ position: 1, length: 1 });
    await one.call('cancel', { runId: holder });
    const fin = await waitTerminal(one, queuedId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('waited its turn');
  }, 90_000);

  it('an unknown run id: RUN_NOT_FOUND', async () => {
    const r = await s().call('status', { runId: 'r-doesnotexist000000000000' });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(/^RUN_NOT_FOUND/);
  });

  it('dismiss hides an ended run from the list; all: true shows it, and an active run needs cancel: true', async () => {
    const r = await s().call('launch', { agent: 'echo', task: 'to dismiss' });
    const runId = sc(r).runId as string;
    await waitTerminal(s(), runId, 60_000);
    const d = await s().call('dismiss', { runId });
    expect(d.isError, textOf(d)).toBeFalsy();
    expect(sc(d)).toMatchObject({ runId, state: 'completed', dismissed: true, cancelled: false });
    expect(sc(await s().call('status', {})).runs.map((x: { runId: string }) => x.runId)).not.toContain(runId);
    const all = sc(await s().call('status', { all: true })).runs.find((x: { runId: string }) => x.runId === runId);
    expect(all.dismissed).toBe(true);
    const active = sc(await s().call('launch', { agent: 'sleeper', task: 'x' })).runId as string;
    const refused = await s().call('dismiss', { runId: active });
    expect(textOf(refused)).toMatch(/^RUN_ACTIVE/);
    const ok = await s().call('dismiss', { runId: active, cancel: true });
    expect(ok.isError, textOf(ok)).toBeFalsy();
    expect(sc(ok)).toMatchObject({ state: 'cancelled', dismissed: true, cancelled: true });
  }, 90_000);

  it('restore: a new session of the same conversation adopts the earlier session\'s runs', async () => {
    const first = sc(await s().call('status', {}));
    const earlier = first.sessionId as string;
    const env: Record<string, string> = { SUBAGENTS_HOME: homes[mode], SUBAGENTS_ROOTS: t.root };
    if (mode === 'redis') env.SUBAGENTS_REDIS_URL = redis.url;
    const next = await startServer(env);
    extra.push(next);
    const before = sc(await next.call('status', {}));
    expect(before.runs).toEqual([]);
    const r = await next.call('restore', { lineage: [earlier, 'never-seen-session-id-0000'] });
    expect(r.isError, textOf(r)).toBeFalsy();
    expect(sc(r).adopted).toBeGreaterThanOrEqual(1);
    expect(sc(r).unknown).toEqual(['never-seen-session-id-0000']);
    expect(sc(r).lineage).toContain(earlier);
    const runId = first.runs[0].runId as string;
    const seen = await next.call('status', { runId });
    expect(seen.isError, textOf(seen)).toBeFalsy();
    expect(sc(seen).adopted).toBe(true);
  }, 90_000);

  it('status {} with waitMs wakes at the next change of any of the session\'s runs', async () => {
    const r = await s().call('launch', { agent: 'sleeper', task: 'list wait' });
    const runId = sc(r).runId as string;
    for (let i = 0; i < 40; i++) {
      const v = sc(await s().call('status', { runId, waitMs: 2000 }));
      if (v.state === 'running') break;
    }
    // The cancel may reach the server before or after the wait starts: either way the wait answers with the
    // cancelled run, never at the end of its 40 s.
    const waiting = s().call('status', { waitMs: 40_000 });
    await s().call('cancel', { runId });
    const w = sc(await waiting);
    const listed = w.runs.find((x: { runId: string }) => x.runId === runId);
    expect(w.changed === true || listed.state === 'cancelled', JSON.stringify({ changed: w.changed, state: listed.state })).toBe(true);
    expect(w.waitedMs).toBeLessThan(40_000);
    await waitTerminal(s(), runId, 30_000);
  }, 90_000);

  it('the session\'s list shows its runs', async () => {
    const v = sc(await s().call('status', {}));
    expect(v.runs.length).toBeGreaterThanOrEqual(5);
    expect(v.capacity.limit).toBe(8);
  });

  it('malformed arguments: INVALID_INPUT with the same text in both modes', async () => {
    const cases: Array<[string, Record<string, unknown>]> = [
      ...INVALID_INPUT_CASES,
      ['launch', { task: 'x' }],
      ['launch', { chain: [{ agent: 'echo', task: 'x', parallel: [{ agent: 'echo', task: 'y' }] }] }],
      ['launch', { agent: 'echo', task: 'x', timeoutMs: -5 }],
      ['launch', { agent: 'echo', task: 'x', timeoutMs: 10 ** 12 }],
    ];
    for (const [tool, args] of cases) sameInBothModes(`invalid ${tool} ${JSON.stringify(args).slice(0, 80)}`, await refused(tool, args, 'INVALID_INPUT'));
  });

  // A cwd that does not exist is refused by a local server but accepted by a distributed one, which checks by path
  // only (docs/scale-out.md, "Pools and roots"): the worker refuses it.
  it('a cwd outside the roots: CWD_NOT_ALLOWED naming what was asked, the same text in both modes', async () => {
    for (const cwd of ['..', '/', '/tmp']) {
      const text = await refused('launch', { agent: 'echo', task: 'x', cwd }, 'CWD_NOT_ALLOWED');
      expect(text).toContain(JSON.stringify(cwd));
      sameInBothModes(`cwd ${cwd}`, text);
    }
  });

  it('ids that are not run ids: RUN_NOT_FOUND from every tool that takes one, the same text in both modes', async () => {
    for (const runId of ['../../x', `r-${'A'.repeat(24)}`, '%2e%2e%2fx', 'ledger', 'r-doesnotexist000000000000']) {
      sameInBothModes(`status ${runId}`, await refused('status', { runId }, 'RUN_NOT_FOUND'));
      sameInBothModes(`status wait ${runId}`, await refused('status', { runId, waitMs: 1000 }, 'RUN_NOT_FOUND'));
      sameInBothModes(`cancel ${runId}`, await refused('cancel', { runId }, 'RUN_NOT_FOUND'));
      sameInBothModes(`dismiss ${runId}`, await refused('dismiss', { runId, cancel: true }, 'RUN_NOT_FOUND'));
      sameInBothModes(`append ${runId}`, await refused('append', { runId, step: { agent: 'echo', task: 'x' } }, 'RUN_NOT_FOUND'));
    }
  });

  it('agents: the same list, each agent available, in both modes', async () => {
    const r = await s().call('agents', {});
    expect(r.isError, textOf(r)).toBeFalsy();
    const list = sc(r).agents as Array<{ name: string; backend: string; available: boolean }>;
    const mine = list.filter((a) => ['echo', 'fails', 'gated', 'sleeper', 'watched'].includes(a.name));
    expect(mine.map((a) => a.name).sort()).toEqual(['echo', 'fails', 'gated', 'sleeper', 'watched']);
    for (const a of mine) expect(a).toMatchObject({ backend: 'command', available: true });
    sameInBothModes('agents', mine.map((a) => ({ ...a, source: undefined })));
  });

  it('launch answers next: the status call that waits for the run', async () => {
    const r = await s().call('launch', { agent: 'echo', task: 'next', label: 'with a label' });
    const runId = sc(r).runId as string;
    expect(sc(r).next).toContain(`status { runId: "${runId}"`);
    sameInBothModes('launch next', (sc(r).next as string).replaceAll(runId, '<runId>'));
    // The answer's state is the only difference: a local launch answers once its runner is up (`running`), a
    // distributed one once its job is queued for a worker (`starting`).
    expect(['starting', 'running']).toContain(sc(r).state);
    sameInBothModes('launch fields', Object.keys(sc(r)).sort());
    sameInBothModes('launch steps and fan-out', { steps: sc(r).steps, fanout: sc(r).fanout, label: sc(r).label });
    const fin = await waitTerminal(s(), runId, 60_000);
    expect(fin.label).toBe('with a label');
    sameInBothModes('ended next', (fin.next as string | undefined)?.replaceAll(runId, '<runId>'));
  }, 90_000);

  it('a run over its timeoutMs: failed/TIMEOUT, its step ended TIMEOUT', async () => {
    const r = await s().call('launch', { agent: 'sleeper', task: 'too slow', timeoutMs: 1500 });
    expect(r.isError, textOf(r)).toBeFalsy();
    const fin = await waitTerminal(s(), sc(r).runId, 60_000);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('TIMEOUT');
    expect(fin.steps[0].error.code).toBe('TIMEOUT');
    sameInBothModes('timeout', { state: fin.state, code: fin.error.code, step: fin.steps[0].state, signal: fin.steps[0].signal });
  }, 90_000);

  it('a chain through a parallel group: {previous} is the group\'s outputs joined under headers', async () => {
    const r = await s().call('launch', { chain: [{ parallel: [{ agent: 'echo', task: 'left' }, { agent: 'echo', task: 'right' }] }, { agent: 'echo', task: 'joined:\n{previous}' }] });
    expect(r.isError, textOf(r)).toBeFalsy();
    const fin = await waitTerminal(s(), sc(r).runId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toContain('left');
    expect(fin.output.text).toContain('right');
    sameInBothModes('chain group output', fin.output.text);
    sameInBothModes('chain group steps', fin.steps.map((x: { index: number; agent: string; state: string; members?: Array<{ state: string }> }) => ({ index: x.index, agent: x.agent, state: x.state, members: x.members?.map((m) => m.state) })));
  }, 90_000);

  it('nesting: an agent delegates through its own server; the nested run completes as a child of its step, charged to the tree', async () => {
    const plan = { launches: [{ agent: 'echo', task: 'nested in both modes' }], wait: true };
    const r = await s().call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    expect(r.isError, textOf(r)).toBeFalsy();
    const fin = await waitTerminal(s(), sc(r).runId, 90_000);
    expect(fin.state, JSON.stringify(fin.error)).toBe('completed');
    const rep = JSON.parse((await s().client.readResource({ uri: `subagents://runs/${fin.runId}/output` })).contents[0]!.text as string) as { results: Array<{ isError: boolean; text: string; structured: any }>; finals: any[] };
    expect(rep.results[0]!.isError, rep.results[0]!.text).toBe(false);
    const childId = rep.results[0]!.structured.runId as string;
    expect(fin.steps[0].children).toEqual([childId]);
    const child = sc(await s().call('status', { runId: childId }));
    expect(child.state).toBe('completed');
    sameInBothModes('nested launch', { fanout: rep.results[0]!.structured.fanout, final: rep.finals[0].state, output: rep.finals[0].output.text });
    sameInBothModes('nested tree', { rootFanout: fin.fanout, childOutput: child.output.text, childSteps: child.steps.map((x: { agent: string; state: string }) => `${x.agent}:${x.state}`) });
  }, 120_000);

  it('cancel of an ended run answers its final state and changes nothing', async () => {
    const runId = sc(await s().call('launch', { agent: 'echo', task: 'ended before the cancel' })).runId as string;
    await waitTerminal(s(), runId, 60_000);
    const c = await s().call('cancel', { runId });
    const answer = { isError: c.isError ?? false, text: textOf(c).replaceAll(runId, '<runId>').replaceAll(sc(c).sessionId, '<sessionId>'), state: sc(c).state };
    sameInBothModes('cancel ended', answer);
    expect(sc(await s().call('status', { runId })).state).toBe('completed');
  }, 90_000);

  it('isolation in a directory outside any git repository, or with a baseRef that is no revision: INVALID_INPUT', async () => {
    sameInBothModes('isolation outside git', await refused('launch', { agent: 'echo', task: 'x', cwd: t.root, isolation: 'worktree' }, 'INVALID_INPUT'));
    sameInBothModes('isolation baseRef', await refused('launch', { agent: 'echo', task: 'x', isolation: 'worktree', baseRef: '-x' }, 'INVALID_INPUT'));
    sameInBothModes('baseRef alone', await refused('launch', { agent: 'echo', task: 'x', baseRef: 'main' }, 'INVALID_INPUT'));
  }, 60_000);

  it('dismiss twice is idempotent, and a dismissed run is still readable by id', async () => {
    const runId = sc(await s().call('launch', { agent: 'echo', task: 'dismissed twice' })).runId as string;
    await waitTerminal(s(), runId, 60_000);
    const first = await s().call('dismiss', { runId });
    const again = await s().call('dismiss', { runId });
    expect(again.isError, textOf(again)).toBeFalsy();
    expect(sc(again)).toMatchObject({ runId, state: 'completed', dismissed: true });
    const normal = (text: string) => text.replaceAll(runId, '<runId>').replaceAll(sc(again).sessionId, '<sessionId>');
    sameInBothModes('dismiss again', normal(textOf(again)));
    sameInBothModes('dismiss first', normal(textOf(first)));
    const seen = await s().call('status', { runId });
    expect(seen.isError, textOf(seen)).toBeFalsy();
    expect(sc(seen)).toMatchObject({ state: 'completed', dismissed: true });
  }, 90_000);

  it('the list\'s entries carry the same fields in both modes, newest first', async () => {
    const v = sc(await s().call('status', { all: true }));
    expect(v.runs.length).toBeGreaterThanOrEqual(2);
    sameInBothModes('list fields', Object.keys(v.runs[0]).sort());
    sameInBothModes('list answer fields', Object.keys(v).sort());
    sameInBothModes('capacity fields', Object.keys(v.capacity).sort());
    const created = v.runs.map((x: { createdAt: string }) => x.createdAt);
    expect([...created].sort().reverse()).toEqual(created);
  });
  /** The run's step states, a group's as its members' states. */
  const shape = (fin: { steps: Array<{ state: string; members?: Array<{ state: string }> }> }) =>
    fin.steps.map((x) => (x.members ? { group: x.state, members: x.members.map((m) => m.state) } : x.state));
  /** Waits until the run's first step (or first group member) is running with its agent's pid. */
  const untilRunning = async (runId: string) => {
    for (let i = 0; i < 60; i++) {
      const v = sc(await s().call('status', { runId, waitMs: 2000 }));
      const first = v.steps[0].members ? v.steps[0].members[0] : v.steps[0];
      if (v.state === 'running' && first.state === 'running' && first.pid) return v;
    }
    throw new Error(`run ${runId} never started`);
  };
  const release = (name: string) => fs.writeFileSync(path.join(t.base, `gate-${mode}-${name}`), '');

  it('appends run after the queued steps in acceptance order, each with {previous}; stepIndex and pendingAppends follow', async () => {
    const runId = sc(await s().call('launch', { chain: [{ agent: 'held', task: 'a' }, { agent: 'echo', task: 'b<{previous}' }] })).runId as string;
    await untilRunning(runId);
    const one = await s().call('append', { runId, step: { agent: 'echo', task: 'c<{previous}' } });
    expect(one.isError, textOf(one)).toBeFalsy();
    expect(sc(one)).toMatchObject({ runId, stepIndex: 2, pendingAppends: 1 });
    const two = await s().call('append', { runId, step: { agent: 'echo', task: 'd<{previous}' } });
    expect(sc(two)).toMatchObject({ runId, stepIndex: 3, pendingAppends: 2 });
    expect(sc(await s().call('status', { runId })).pendingAppends).toBe(2);
    sameInBothModes('append answer', textOf(two).replaceAll(runId, '<runId>').replaceAll(sc(two).sessionId ?? '', '<sessionId>'));
    release('held');
    const fin = await waitTerminal(s(), runId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('d<c<b<a');
    expect(shape(fin)).toEqual(['completed', 'completed', 'completed', 'completed']);
  }, 90_000);

  it('accepted appends of a run that is then cancelled show as skipped', async () => {
    const runId = sc(await s().call('launch', { chain: [{ agent: 'sleeper', task: 'x' }] })).runId as string;
    await untilRunning(runId);
    const a = await s().call('append', { runId, step: { agent: 'echo', task: 'never' } });
    expect(a.isError, textOf(a)).toBeFalsy();
    await s().call('cancel', { runId });
    const fin = await waitTerminal(s(), runId, 30_000);
    expect(fin.state).toBe('cancelled');
    expect(shape(fin)).toEqual(['cancelled', 'skipped']);
  }, 90_000);

  it('accepted appends of a chain whose step fails are skipped; the run fails STEP_FAILED with the failed step\'s output', async () => {
    const runId = sc(await s().call('launch', { chain: [{ agent: 'held2', task: 'a' }, { agent: 'fails', task: 'x' }, { agent: 'echo', task: 'never' }] })).runId as string;
    await untilRunning(runId);
    expect((await s().call('append', { runId, step: { agent: 'echo', task: 'never either' } })).isError).toBeFalsy();
    release('held2');
    const fin = await waitTerminal(s(), runId, 60_000);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('STEP_FAILED');
    expect(shape(fin)).toEqual(['completed', 'failed', 'skipped', 'skipped']);
    sameInBothModes('failed chain output', fin.output.text);
    sameInBothModes('failed chain error', fin.error.message.replaceAll(runId, '<runId>'));
  }, 90_000);

  it('failFast in a chain\'s group: the group fails at once, its running member is cancelled, the chain stops', async () => {
    const r = await s().call('launch', { chain: [{ parallel: [{ agent: 'sleeper', task: 'x' }, { agent: 'fails', task: 'y' }], failFast: true }, { agent: 'echo', task: 'never' }] });
    expect(r.isError, textOf(r)).toBeFalsy();
    const fin = await waitTerminal(s(), sc(r).runId, 60_000);
    expect(fin.state).toBe('failed');
    expect(shape(fin)).toEqual([{ group: 'failed', members: ['cancelled', 'failed'] }, 'skipped']);
    sameInBothModes('failFast error code', fin.error.code);
  }, 90_000);

  it('cancel mid-group: running members cancelled, unstarted skipped, later steps skipped', async () => {
    const r = await s().call('launch', { chain: [{ parallel: [{ agent: 'sleeper', task: '1' }, { agent: 'sleeper', task: '2' }, { agent: 'sleeper', task: '3' }], concurrency: 2 }, { agent: 'echo', task: 'never' }] });
    const runId = sc(r).runId as string;
    for (let i = 0; i < 60; i++) {
      const v = sc(await s().call('status', { runId, waitMs: 2000 }));
      if (v.steps[0].members.filter((m: { state: string; pid?: number }) => m.state === 'running' && m.pid).length === 2) break;
    }
    await s().call('cancel', { runId });
    const fin = await waitTerminal(s(), runId, 30_000);
    expect(fin.state).toBe('cancelled');
    expect(shape(fin)).toEqual([{ group: 'cancelled', members: ['cancelled', 'cancelled', 'skipped'] }, 'skipped']);
  }, 90_000);

  it('a parallel run: without failFast every member runs and the run fails if one failed; a parallel-only chain answers the joined text', async () => {
    const r = await s().call('launch', { tasks: [{ agent: 'echo', task: 'p1' }, { agent: 'fails', task: 'x' }, { agent: 'echo', task: 'p3' }] });
    const fin = await waitTerminal(s(), sc(r).runId, 60_000);
    expect(fin.state).toBe('failed');
    expect(fin.steps.map((x: { state: string }) => x.state)).toEqual(['completed', 'failed', 'completed']);
    sameInBothModes('parallel failed', { code: fin.error.code, outputs: fin.steps.map((x: { output: { text: string } }) => x.output.text) });
    const c = await s().call('launch', { chain: [{ parallel: [{ agent: 'echo', task: 'g1' }, { agent: 'echo', task: 'g2' }] }] });
    const done = await waitTerminal(s(), sc(c).runId, 60_000);
    expect(done.state).toBe('completed');
    sameInBothModes('parallel-only chain output', done.output.text);
  }, 90_000);

  it('whole-run limits: a chain over its timeoutMs cancels its running step and skips the rest; a parallel run skips its unstarted members', async () => {
    const chain = await s().call('launch', { chain: [{ agent: 'sleeper', task: 'x' }, { agent: 'echo', task: 'never' }], timeoutMs: 1500 });
    const fin = await waitTerminal(s(), sc(chain).runId, 60_000);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('TIMEOUT');
    sameInBothModes('chain over its limit', shape(fin));
    const par = await s().call('launch', { tasks: [{ agent: 'sleeper', task: '1' }, { agent: 'sleeper', task: '2' }, { agent: 'sleeper', task: '3' }], concurrency: 2, timeoutMs: 1500 });
    const pfin = await waitTerminal(s(), sc(par).runId, 60_000);
    expect(pfin.state).toBe('failed');
    expect(pfin.error.code).toBe('TIMEOUT');
    expect(pfin.steps.map((x: { state: string }) => x.state).sort()).toEqual(['cancelled', 'cancelled', 'skipped']);
  }, 90_000);

  it('tasks: over 1 MiB refused INVALID_INPUT with the same text; one starting with -- reaches the agent verbatim', async () => {
    sameInBothModes('task over 1 MiB', await refused('launch', { agent: 'echo', task: 'x'.repeat(2 * 1024 * 1024) }, 'INVALID_INPUT'));
    const r = await s().call('launch', { agent: 'echo', task: '--help --version -rf' });
    const fin = await waitTerminal(s(), sc(r).runId, 60_000);
    expect(fin.output.text).toBe('--help --version -rf');
  }, 90_000);

  it('a queued run past its queueTimeoutMs ends failed/QUEUE_TIMEOUT; dismiss { cancel } of a queued run cancels it', async () => {
    const env: Record<string, string> = { SUBAGENTS_HOME: homes[mode], SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_ACTIVE_RUNS: '1', SUBAGENTS_KILL_GRACE_MS: '1000' };
    if (mode === 'redis') env.SUBAGENTS_REDIS_URL = redis.url;
    const one = await startServer(env);
    extra.push(one);
    const holder = sc(await one.call('launch', { agent: 'sleeper', task: 'holds the slot' })).runId as string;
    const late = await one.call('launch', { agent: 'echo', task: 'waits too long', queueTimeoutMs: 1000 });
    expect(sc(late).state).toBe('queued');
    const fin = await waitTerminal(one, sc(late).runId, 60_000);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('QUEUE_TIMEOUT');
    const queued = sc(await one.call('launch', { agent: 'echo', task: 'dismissed while queued' })).runId as string;
    const d = await one.call('dismiss', { runId: queued, cancel: true });
    expect(d.isError, textOf(d)).toBeFalsy();
    expect(sc(d)).toMatchObject({ runId: queued, state: 'cancelled', dismissed: true, cancelled: true });
    await one.call('cancel', { runId: holder });
    await waitTerminal(one, holder, 30_000);
  }, 90_000);

  it('another session sees none of this session\'s runs: every tool answers as for a run that does not exist', async () => {
    const runId = sc(await s().call('launch', { agent: 'echo', task: 'mine only' })).runId as string;
    await waitTerminal(s(), runId, 60_000);
    const env: Record<string, string> = { SUBAGENTS_HOME: homes[mode], SUBAGENTS_ROOTS: t.root };
    if (mode === 'redis') env.SUBAGENTS_REDIS_URL = redis.url;
    const other = await startServer(env);
    extra.push(other);
    const ghost = 'r-doesnotexist000000000000';
    const calls: Array<[string, (id: string) => Record<string, unknown>]> = [
      ['status', (id) => ({ runId: id })], ['cancel', (id) => ({ runId: id })], ['dismiss', (id) => ({ runId: id })],
      ['append', (id) => ({ runId: id, step: { agent: 'echo', task: 'x' } })],
    ];
    for (const [tool, args] of calls) {
      const theirs = await other.call(tool, args(runId));
      const none = await other.call(tool, args(ghost));
      expect(theirs.isError, tool).toBe(true);
      expect(textOf(theirs).replaceAll(runId, '<id>'), tool).toBe(textOf(none).replaceAll(ghost, '<id>'));
    }
    await expect(other.client.readResource({ uri: `subagents://runs/${runId}` })).rejects.toThrow(/RUN_NOT_FOUND|not found/i);
    expect((await other.client.listResources()).resources.map((x) => x.uri)).not.toContain(`subagents://runs/${runId}`);
    expect(sc(await s().call('status', { runId })).state).toBe('completed');
  }, 90_000);

  it('MCP Tasks: create → get → list → cancel → result, a failed run is a failed task, another session sees none', async () => {
    const env: Record<string, string> = { SUBAGENTS_HOME: homes[mode], SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '1000' };
    if (mode === 'redis') env.SUBAGENTS_REDIS_URL = redis.url;
    const ts = await startServer(env, { capabilities: { tasks: { list: {}, cancel: {} } } });
    extra.push(ts);
    await ts.client.listTools();
    const tasks = ts.client.experimental.tasks;
    const createTask = (args: Record<string, unknown>) =>
      ts.client.request({ method: 'tools/call', params: { name: 'launch', arguments: args, task: { ttl: 60_000 } } }, CreateTaskResultSchema);
    const created = await createTask({ agent: 'sleeper', task: 'wait for a cancel' });
    const taskId = created.task.taskId;
    expect(created.task).toMatchObject({ status: 'working', ttl: null });
    expect(await tasks.getTask(taskId)).toMatchObject({ taskId, status: 'working' });
    expect((await tasks.listTasks()).tasks.map((x) => x.taskId)).toContain(taskId);
    const cancelled = await tasks.cancelTask(taskId);
    expect(cancelled).toMatchObject({ taskId, status: 'cancelled' });
    expect(cancelled.statusMessage).toMatch(/^CANCELLED: /);
    const r = await tasks.getTaskResult(taskId, CallToolResultSchema);
    expect(sc(r as never)).toMatchObject({ runId: taskId, state: 'cancelled', error: { code: 'CANCELLED' } });
    await expect(tasks.cancelTask(taskId)).rejects.toThrow(/terminal/);

    const failed = await createTask({ agent: 'fails', task: 'x' });
    const fr = await tasks.getTaskResult(failed.task.taskId, CallToolResultSchema);
    expect(sc(fr as never)).toMatchObject({ state: 'failed', error: { code: 'STEP_FAILED' } });
    const ft = await tasks.getTask(failed.task.taskId);
    expect(ft.status).toBe('failed');
    expect(ft.statusMessage).toMatch(/^STEP_FAILED: /);

    const other = await startServer(env, { capabilities: { tasks: { list: {}, cancel: {} } } });
    extra.push(other);
    const theirs = other.client.experimental.tasks;
    await expect(theirs.getTask(taskId)).rejects.toThrow(/Task not found: RUN_NOT_FOUND/);
    await expect(theirs.cancelTask(failed.task.taskId)).rejects.toThrow(/Task not found/);
    expect((await theirs.listTasks()).tasks).toEqual([]);
    const other2 = await other.client.request({ method: 'tools/call', params: { name: 'status', arguments: {}, task: {} } }, CreateTaskResultSchema).catch((e: unknown) => e);
    expect(other2).toBeInstanceOf(McpError);
    expect((other2 as McpError).message).toMatch(/Only launch runs as a task/);
  }, 90_000);
  it('resources: output over 4 MiB paged along _meta.next, offsets and lengths, multi-byte text never split, events as JSON lines', async () => {
    const text = (r: { contents: unknown[] }) => (r.contents[0] as { text: string }).text;
    const meta = (r: { contents: unknown[] }) => (r.contents[0] as { _meta: { offset: number; bytes: number; next?: string } })._meta;
    const readAll = async (uri: string) => {
      const pages: string[] = [];
      for (let next: string | undefined = uri; next; ) {
        const r = await s().client.readResource({ uri: next });
        pages.push(text(r));
        expect(meta(r).next).not.toBe(next);
        next = meta(r).next;
        if (pages.length > 10_000) throw new Error('paging does not advance');
      }
      return pages;
    };
    const flood = sc(await s().call('launch', { agent: 'flood', task: 'x' })).runId as string;
    const MULTI = 'aé€😀'.repeat(25) + '\nend';
    const multi = sc(await s().call('launch', { agent: 'echo', task: MULTI })).runId as string;
    for (const id of [flood, multi]) expect((await waitTerminal(s(), id, 60_000)).state).toBe('completed');
    const uri = `subagents://runs/${flood}/output`;
    const pages = await readAll(uri);
    expect(pages.map((p) => Buffer.byteLength(p))).toEqual([4 * 1024 * 1024, 4_500_000 - 4 * 1024 * 1024]);
    const step = await readAll(`subagents://runs/${flood}/steps/0/output?offset=4000000`);
    expect(step.join('')).toBe(pages.join('').slice(4_000_000));
    const head = await s().client.readResource({ uri: `${uri}?length=100` });
    expect(meta(head)).toMatchObject({ offset: 0, bytes: 4_500_000, next: `${uri}?offset=100&length=100` });
    const past = await s().client.readResource({ uri: `${uri}?offset=9999999` });
    expect(text(past)).toBe('');
    expect(meta(past).next).toBeUndefined();
    for (const length of [1, 3, 7, 1000]) {
      const parts = await readAll(`subagents://runs/${multi}/output?length=${length}`);
      expect(parts.join('')).toBe(MULTI);
      expect(parts.some((p) => p.includes('\uFFFD'))).toBe(false);
    }
    const inside = await s().client.readResource({ uri: `subagents://runs/${multi}/output?offset=2&length=6` });
    sameInBothModes('offset inside a character', { offset: meta(inside).offset, text: text(inside) });
    const events = text(await s().client.readResource({ uri: `subagents://runs/${multi}/events` }));
    const lines = events.split('\n');
    expect(lines.length).toBeGreaterThan(1);
    for (const line of lines) expect(typeof JSON.parse(line).type).toBe('string');
    const evPages = await readAll(`subagents://runs/${multi}/events?length=${Math.ceil(Buffer.byteLength(events) / 2)}`);
    expect(evPages.join('\n')).toBe(events);
    const status = JSON.parse(text(await s().client.readResource({ uri: `subagents://runs/${multi}` })));
    expect(status).toMatchObject({ runId: multi, state: 'completed', output: { text: MULTI } });
  }, 120_000);
  it('a parallel run never runs more members than its concurrency and does run that many at once (3, and 4 by default)', async () => {
    const maxSeen = (dir: string) => fs.readdirSync(dir).filter((n) => n.endsWith('.max')).map((n) => Number(fs.readFileSync(path.join(dir, n), 'utf8')));
    for (const [agent, width, concurrency] of [['peers3', 3, 3], ['peers4', 4, undefined]] as const) {
      const tasks = Array.from({ length: width + 2 }, (_, j) => ({ agent, task: JSON.stringify(j < width ? { target: width } : { target: 1, lingerMs: 100 }) }));
      const l = await s().call('launch', { tasks, ...(concurrency ? { concurrency } : {}) });
      expect(l.isError, textOf(l)).toBeFalsy();
      expect(sc(l).fanout).toEqual({ used: width + 2, limit: 64, remaining: 62 - width });
      const fin = await waitTerminal(s(), sc(l).runId, 60_000);
      expect(fin.state).toBe('completed');
      const seen = maxSeen(path.join(t.base, `gate-${mode}-${agent}`));
      expect(seen).toHaveLength(width + 2);
      expect(Math.max(...seen)).toBe(width);
    }
  }, 90_000);

  it('outputBytes bounds inline output per member and for the run, with the real byte counts', async () => {
    const l = await s().call('launch', { tasks: [{ agent: 'flood20k', task: 'x' }, { agent: 'echo', task: 'small' }] });
    await waitTerminal(s(), sc(l).runId, 60_000);
    const v = sc(await s().call('status', { runId: sc(l).runId, outputBytes: 1024 }));
    expect(v.state).toBe('completed');
    const [big, small] = v.steps;
    expect(big.output.bytes).toBe(20000);
    expect(big.output.truncated).toBe(true);
    expect(Buffer.byteLength(big.output.text)).toBeLessThan(1024);
    expect(small.output).toEqual({ text: 'small', bytes: 5, truncated: false });
    expect(v.output.truncated).toBe(true);
    expect(v.output.bytes).toBeGreaterThan(20000);
    expect(Buffer.byteLength(v.output.text)).toBeLessThan(1024);
    sameInBothModes('outputBytes', { big: big.output, run: { ...v.output, uri: undefined } });
  }, 90_000);

  it('the tree\'s fan-out budget is claimed at acceptance, all or nothing: FANOUT_EXHAUSTED for a launch or an append that does not fit', async () => {
    const env: Record<string, string> = { SUBAGENTS_HOME: homes[mode], SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_SPAWNS_PER_RUN: '4' };
    if (mode === 'redis') env.SUBAGENTS_REDIS_URL = redis.url;
    const s4 = await startServer(env);
    extra.push(s4);
    const step = (task: string) => ({ agent: 'echo', task });
    const tooBig = await s4.call('launch', { chain: [step('a'), { parallel: [step('b'), step('c'), step('d'), step('e')] }] });
    expect(textOf(tooBig)).toMatch(/^FANOUT_EXHAUSTED: .*4/);
    sameInBothModes('fan-out launch', textOf(tooBig));
    const runId = sc(await s4.call('launch', { chain: [{ agent: 'held3', task: 'held' }] })).runId as string;
    for (let i = 0; i < 60; i++) {
      const v = sc(await s4.call('status', { runId, waitMs: 2000 }));
      if (v.state === 'running' && v.steps[0].pid) break;
    }
    const big = await s4.call('append', { runId, step: { parallel: [step('1'), step('2'), step('3'), step('4')] } });
    expect(textOf(big)).toMatch(/^FANOUT_EXHAUSTED: .*3 of 4 .* needs 4/);
    sameInBothModes('fan-out append', textOf(big).replaceAll(runId, '<runId>'));
    const fits = await s4.call('append', { runId, step: { parallel: [step('1'), step('2'), step('3')] } });
    expect(fits.isError, textOf(fits)).toBeFalsy();
    expect(sc(fits)).toMatchObject({ stepIndex: 1, pendingAppends: 1, fanout: { used: 4, limit: 4, remaining: 0 } });
    expect(sc(await s4.call('status', { runId }))).toMatchObject({ pendingAppends: 1, fanout: { used: 4, limit: 4, remaining: 0 } });
    expect(textOf(await s4.call('append', { runId, step: step('5') }))).toMatch(/^FANOUT_EXHAUSTED: .*0 of 4/);
    release('held3');
    const fin = await waitTerminal(s4, runId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.steps[1].members.map((m: { output: { text: string } }) => m.output.text)).toEqual(['1', '2', '3']);
  }, 90_000);

  it('a first step that fails at once: the run is launched all the same and fails STEP_FAILED (never HANDSHAKE_FAILED)', async () => {
    for (const args of [{ agent: 'fails', task: 'x' }, { chain: [{ agent: 'fails', task: 'x' }, { agent: 'echo', task: 'y' }] }, { tasks: [{ agent: 'fails', task: 'x' }] }]) {
      const l = await s().call('launch', args);
      expect(l.isError, textOf(l)).toBeFalsy();
      const fin = await waitTerminal(s(), sc(l).runId, 60_000);
      expect(fin.state).toBe('failed');
      expect(fin.error.code).toBe('STEP_FAILED');
    }
  }, 90_000);

  it('an unknown agent: refused UNKNOWN_AGENT locally; in distributed mode the run fails naming the worker\'s UNKNOWN_AGENT (docs/scale-out.md, "Differences from local mode")', async () => {
    if (mode === 'local') {
      const text = await refused('launch', { agent: 'no-such-agent', task: 'x' }, 'UNKNOWN_AGENT');
      expect(text).toContain('"no-such-agent"');
      return;
    }
    const l = await s().call('launch', { agent: 'no-such-agent', task: 'x' });
    expect(l.isError, textOf(l)).toBeFalsy();
    const fin = await waitTerminal(s(), sc(l).runId, 60_000);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('HANDSHAKE_FAILED');
    expect(fin.error.message).toMatch(/UNKNOWN_AGENT: no agent named "no-such-agent"/);
  }, 90_000);

  it('tools/list: the same tools, schemas and annotations in both modes', async () => {
    const { tools } = await s().client.listTools();
    expect(tools.map((x) => x.name)).toEqual(expect.arrayContaining(['agents', 'append', 'cancel', 'dismiss', 'launch', 'restore', 'status']));
    sameInBothModes('tools/list', tools);
  });
  it('progress notes only while a status call waits, increasing, and none when a call answers at once', async () => {
    const arrivals: Array<{ at: number; m: unknown }> = [];
    const deliver = s().transport.onmessage;
    s().transport.onmessage = (m, extra) => { arrivals.push({ at: performance.now(), m }); deliver?.(m, extra); };
    try {
      const progressOf = (from: number) => arrivals.slice(from).filter((a) => (a.m as { method?: string }).method === 'notifications/progress');
      // (A launch whose handshake is slow on a loaded machine may note its phase: not asserted here.)
      const r = await s().call('launch', { agent: 'nap', task: 'take a moment' });
      const runId = sc(r).runId as string;
      let mark = arrivals.length;
      await s().call('status', { runId }, { onprogress: () => {} });
      expect(progressOf(mark)).toEqual([]);
      mark = arrivals.length;
      const w = await s().call('status', { runId, waitMs: 30_000, until: 'terminal' }, { onprogress: () => {} });
      expect(sc(w).state).toBe('completed');
      expect(sc(w).changed).toBe(true);
      const params = progressOf(mark).map((n) => (n.m as { params: { progress: number; message: string } }).params);
      expect(params.length).toBeGreaterThanOrEqual(1);
      expect(params[0]!.message).toBe(`waiting on ${runId}`);
      expect(params.map((p) => p.progress)).toEqual([...params.map((p) => p.progress)].sort((a, b) => a - b));
      mark = arrivals.length;
      const again = sc(await s().call('status', { runId, waitMs: 30_000 }, { onprogress: () => {} }));
      expect(again).toMatchObject({ state: 'completed', changed: false, waitedMs: 0 });
      expect(progressOf(mark)).toEqual([]);
    } finally {
      s().transport.onmessage = deliver;
    }
  }, 90_000);

  it('a subscribed run is updated by changes another server makes (an append, a cancel), and its end is logged once at info', async () => {
    const logs: Array<{ level: string; data: unknown }> = [];
    const updates: string[] = [];
    s().client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => { logs.push({ level: n.params.level, data: n.params.data }); });
    s().client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => { updates.push(n.params.uri); });
    const until = async (what: string, cond: () => boolean | Promise<boolean>) => {
      const end = Date.now() + 30_000;
      while (!(await cond())) {
        if (Date.now() > end) throw new Error(`${what}: no notification (updates ${JSON.stringify(updates)}, logs ${JSON.stringify(logs)})`);
        await new Promise((res) => setTimeout(res, 50));
      }
    };
    const runId = sc(await s().call('launch', { chain: [{ agent: 'held4', task: 'one' }] })).runId as string;
    const sessionId = sc(await s().call('status', { runId })).sessionId as string;
    const uri = `subagents://runs/${runId}`;
    await s().client.subscribeResource({ uri });
    await untilRunning(runId);
    const env: Record<string, string> = { SUBAGENTS_HOME: homes[mode], SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '1000' };
    if (mode === 'redis') env.SUBAGENTS_REDIS_URL = redis.url;
    const b = await startServer(env);
    extra.push(b);
    expect(sc(await b.call('restore', { lineage: [sessionId] })).adopted).toBeGreaterThanOrEqual(1);
    const seen = updates.filter((u) => u === uri).length;
    const ap = await b.call('append', { runId, step: { agent: 'echo', task: 'two after {previous}' } });
    expect(ap.isError, textOf(ap)).toBeFalsy();
    await until('append from another server', () => updates.filter((u) => u === uri).length > seen);
    release('held4');
    await until('end logged', () => logs.some((m) => String(m.data).includes(`run ${runId} completed`)));
    expect(logs.find((m) => String(m.data).includes(runId))!.level).toBe('info');
    const fin = sc(await s().call('status', { runId }));
    expect(fin.output.text).toBe('two after one');
    const run2 = sc(await s().call('launch', { agent: 'held5', task: 'cancelled elsewhere' })).runId as string;
    await s().client.subscribeResource({ uri: `subagents://runs/${run2}` });
    expect(sc(await b.call('cancel', { runId: run2 })).state).toBe('cancelled');
    await until('cancel from another server', () => updates.includes(`subagents://runs/${run2}`) && logs.some((m) => String(m.data) === `run ${run2} cancelled`));
    expect(logs.filter((m) => String(m.data).includes(runId))).toHaveLength(1);
    await s().client.unsubscribeResource({ uri });
    await s().client.unsubscribeResource({ uri: `subagents://runs/${run2}` });
  }, 90_000);

  it('lineage: a session that restores a restoring session sees the first session\'s runs', async () => {
    const env: Record<string, string> = { SUBAGENTS_HOME: homes[mode], SUBAGENTS_ROOTS: t.root };
    if (mode === 'redis') env.SUBAGENTS_REDIS_URL = redis.url;
    const a = await startServer(env);
    extra.push(a);
    const runId = sc(await a.call('launch', { agent: 'echo', task: 'from A' })).runId as string;
    const sa = sc(await a.call('status', {})).sessionId as string;
    await waitTerminal(a, runId, 60_000);
    const b = await startServer(env);
    extra.push(b);
    const sb = sc(await b.call('status', {})).sessionId as string;
    expect(sc(await b.call('restore', { lineage: [sa] })).adopted).toBe(1);
    const c = await startServer(env);
    extra.push(c);
    const r = await c.call('restore', { lineage: [sb] });
    expect(r.isError, textOf(r)).toBeFalsy();
    expect(sc(r).lineage).toEqual(expect.arrayContaining([sa, sb]));
    const seen = sc(await c.call('status', { runId }));
    expect(seen).toMatchObject({ state: 'completed', adopted: true, output: { text: 'from A' } });
    expect(sc(await c.call('status', {})).runs.map((x: { runId: string }) => x.runId)).toContain(runId);
  }, 90_000);
  it('completion offers the session\'s run ids and a run\'s step keys; another session is offered none of them', async () => {
    const runId = sc(await s().call('launch', { tasks: [{ agent: 'echo', task: 'a' }, { agent: 'echo', task: 'b' }] })).runId as string;
    await waitTerminal(s(), runId, 60_000);
    const ref = { type: 'ref/resource' as const, uri: 'subagents://runs/{runId}/output' };
    const mine = await s().client.complete({ ref, argument: { name: 'runId', value: runId.slice(0, 10) } });
    expect(mine.completion.values).toContain(runId);
    expect(mine.completion.values.every((v) => v.startsWith(runId.slice(0, 10)))).toBe(true);
    const steps = await s().client.complete({
      ref: { type: 'ref/resource', uri: 'subagents://runs/{runId}/steps/{index}/output' },
      argument: { name: 'index', value: '' }, context: { arguments: { runId } },
    });
    expect(steps.completion.values.length).toBeGreaterThanOrEqual(2);
    sameInBothModes('completion of step keys', steps.completion.values);
    const env: Record<string, string> = { SUBAGENTS_HOME: homes[mode], SUBAGENTS_ROOTS: t.root };
    if (mode === 'redis') env.SUBAGENTS_REDIS_URL = redis.url;
    const other = await startServer(env);
    extra.push(other);
    const theirs = await other.client.complete({ ref, argument: { name: 'runId', value: runId.slice(0, 10) } });
    expect(theirs.completion.values).not.toContain(runId);
  }, 90_000);
});
