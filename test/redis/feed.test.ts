/**
 * What people and clients see of runs over Redis (docs/watch-and-ui.md, "Over Redis"): `watch --redis` as a real
 * process reading the feed stream, and a server's list-change and run-end notifications, with a private
 * redis-server, real servers and a real worker. Every wait is bounded and waits for a condition.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliStream } from '../cli/helpers.js';
import { startUi, type UiProcess } from '../ui/ui-process.js';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { startWorker, stopWorker, until, type WorkerProc } from '../helpers/redis-fleet.js';
import { REDIS_SERVER, startRedis, type RedisInstance } from '../helpers/redis-server.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { skipWithout } from '../helpers/system-tools.js';

const skipped = skipWithout('redis-server', REDIS_SERVER !== null);
const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

interface Line { cursor: string; ts: string; type: string; runId: string; sessionId: string; [k: string]: unknown }
const lines = (text: string): Line[] => text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Line);

let redis: RedisInstance;
let t: ReturnType<typeof tempStateHome>;
let worker: WorkerProc;
const servers: Started[] = [];
const streams: Array<ReturnType<typeof cliStream>> = [];
const uis: UiProcess[] = [];
const agents = (dir: string) => {
  writeAgent(dir, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
  writeAgent(dir, 'fails', { backend: 'command', command: ['node', FAKE, 'exit', '3'] });
  writeAgent(dir, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
};

async function server(): Promise<Started> {
  const home = path.join(t.base, `server-${servers.length}`);
  fs.mkdirSync(home, { mode: 0o700 });
  agents(path.join(home, 'agents'));
  const s = await startServer({ SUBAGENTS_HOME: home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_REDIS_URL: redis.url });
  servers.push(s);
  return s;
}

async function launch(s: Started, args: Record<string, unknown>): Promise<{ runId: string; sessionId: string }> {
  const r = await s.call('launch', args);
  expect(r.isError, textOf(r)).toBeFalsy();
  return { runId: sc(r).runId, sessionId: sc(r).sessionId };
}

/** `watch` over Redis as a real process; `viaEnv` gives the URL as SUBAGENTS_REDIS_URL instead of --redis. */
function watch(args: string[], o: { viaEnv?: boolean } = {}) {
  const env: Record<string, string> = { SUBAGENTS_HOME: path.join(t.base, 'cli-home') };
  if (o.viaEnv) env.SUBAGENTS_REDIS_URL = redis.url;
  const w = cliStream(['watch', ...(o.viaEnv ? [] : ['--redis', redis.url]), ...args], env);
  streams.push(w);
  return w;
}

beforeAll(async () => {
  if (skipped) return;
  redis = await startRedis();
  t = tempStateHome('sa-rfeed-');
  worker = await startWorker({ redisUrl: redis.url, home: path.join(t.base, 'worker'), roots: [t.root], agents });
}, 60_000);

afterAll(async () => {
  for (const w of streams) w.child.kill('SIGKILL');
  for (const u of uis) await u.stop();
  for (const s of servers) await s.close();
  if (worker) await stopWorker(worker, 'SIGKILL');
  await redis?.stop();
  t?.cleanup();
}, 30_000);

describe.skipIf(skipped)('watch over Redis', () => {
  it('prints each run event once, in order, as it happens, and resumes after a cursor without duplicates or gaps', async () => {
    const s = await server();
    const w = watch(['--json']);
    // Watching from now on: warm-up runs until one shows, so watch has read the feed's end before the runs below.
    await until(async () => {
      const warm = await launch(s, { agent: 'echo', task: 'warm-up' });
      await waitTerminal(s, warm.runId);
      return w.stdout().includes(`"runId":"${warm.runId}"`);
    }, 60_000, 'a warm-up run shown by watch');
    const a = await launch(s, { agent: 'echo', task: 'one' });
    await waitTerminal(s, a.runId);
    await until(() => lines(w.stdout()).some((l) => l.runId === a.runId && l.type === 'ended'), 30_000, 'run a\'s ended line');
    const seen = lines(w.stdout());
    const of = (id: string, list = seen) => list.filter((l) => l.runId === id);
    expect(of(a.runId).map((l) => l.type)).toEqual(['accepted', 'started', 'step-started', 'step-ended', 'ended']);
    const [, started, stepStarted, stepEnded, ended] = of(a.runId);
    expect(started).toMatchObject({ worker: worker.id(), host: expect.any(String) });
    expect(stepStarted).toMatchObject({ step: '0', agent: 'echo' });
    expect(stepEnded).toMatchObject({ step: '0', agent: 'echo', state: 'completed', exitCode: 0 });
    expect(ended).toMatchObject({ state: 'completed', sessionId: a.sessionId, rootRunId: a.runId, depth: 0, parentRunId: null });
    for (const l of seen) expect(l.cursor).toMatch(/^\d+-\d+$/);
    w.child.kill('SIGTERM');
    expect(await w.exited).toBe(0);

    // Resume from the last line: exactly what came after it, a failing run's end included, nothing twice.
    const last = seen[seen.length - 1]!.cursor;
    const b = await launch(s, { agent: 'fails', task: 'x' });
    expect((await waitTerminal(s, b.runId)).state).toBe('failed');
    const r = watch(['--json', '--since', last], { viaEnv: true });
    await until(() => lines(r.stdout()).some((l) => l.runId === b.runId && l.type === 'ended'), 30_000, 'run b\'s ended line');
    const resumed = lines(r.stdout());
    expect(resumed.map((l) => l.runId).every((id) => id === b.runId)).toBe(true);
    expect(resumed.map((l) => l.type)).toEqual(['accepted', 'started', 'step-started', 'step-ended', 'ended']);
    expect(resumed[resumed.length - 1]).toMatchObject({ state: 'failed', error: expect.any(String) });
    expect(new Set(resumed.map((l) => l.cursor)).size).toBe(resumed.length);
  }, 180_000);

  it('--since start replays the feed in human lines of the local format; --session keeps one session\'s runs', async () => {
    const s1 = await server();
    const s2 = await server();
    const one = await launch(s1, { agent: 'echo', task: 'from session one' });
    await waitTerminal(s1, one.runId);
    const two = await launch(s2, { agent: 'echo', task: 'from session two' });
    await waitTerminal(s2, two.runId);
    const h = watch(['--since', 'start']);
    await until(() => h.stdout().includes(`${two.runId}  ended`), 30_000, 'the human ended line');
    const line = h.stdout().split('\n').find((l) => l.includes(one.runId) && l.includes('step-ended'))!;
    expect(line).toMatch(new RegExp(`^\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\.\\d{3}  ${one.runId}  step-ended   step 0 echo completed exit 0  @\\d+-\\d+$`));
    expect(h.stdout()).toMatch(new RegExp(`${one.runId}  started      on \\S+  @`));
    const f = watch(['--json', '--since', 'start', '--session', two.sessionId.slice(0, 12)]);
    await until(() => lines(f.stdout()).some((l) => l.runId === two.runId && l.type === 'ended'), 30_000, 'session two\'s ended line');
    // Session one's run came first in the feed: had the filter let it through, it would be printed before.
    expect(lines(f.stdout()).every((l) => l.sessionId === two.sessionId)).toBe(true);
  }, 180_000);

  it('a cursor that is not one of the feed\'s is a usage error', async () => {
    const w = watch(['--since', 'r-nope.12']);
    expect(await w.exited).toBe(2);
    expect(w.stderr()).toContain('is not a cursor of this Redis');
  }, 60_000);
});

describe.skipIf(skipped)('notifications over Redis', () => {
  /** Notifications the client received, by method, with their params. */
  const got = (s: Started, method: string) => s.received().filter((m) => 'method' in m && m.method === method).map((m) => ('params' in m ? m.params : undefined) as Record<string, unknown> | undefined);
  const LIST = 'notifications/resources/list_changed';

  it('a launch, a dismissal from the command line and a restore change the session\'s list; a run\'s end is a message', async () => {
    const s1 = await server();
    const s2 = await server();
    const a = await launch(s1, { agent: 'echo', task: 'listed' });
    await until(() => got(s1, LIST).length >= 1, 30_000, 'list_changed after the launch');
    await waitTerminal(s1, a.runId);
    await until(() => got(s1, 'notifications/message').some((p) => p?.data === `run ${a.runId} completed`), 30_000, 'the run\'s end message');
    expect(got(s1, 'notifications/message').find((p) => p?.data === `run ${a.runId} completed`)).toMatchObject({ level: 'info' });
    // The other session sees none of it.
    expect(got(s2, LIST)).toEqual([]);

    // Dismissed by another process (the command line): the list of the run's session changes.
    const before = got(s1, LIST).length;
    const d = cliStream(['dismiss', '--redis', redis.url, a.runId], { SUBAGENTS_HOME: path.join(t.base, 'cli-home') });
    streams.push(d);
    expect(await d.exited, d.stderr()).toBe(0);
    await until(() => got(s1, LIST).length > before, 30_000, 'list_changed after the dismissal');
    const listed = await s1.client.listResources();
    expect(listed.resources.map((r) => r.name)).not.toContain(a.runId);

    // Restore adopts session one's runs into session two: its list changes, and a later launch of session one too.
    const r = await s2.call('restore', { lineage: [a.sessionId] });
    expect(r.isError, textOf(r)).toBeFalsy();
    await until(() => got(s2, LIST).length >= 1, 30_000, 'list_changed after the restore');
    const after = got(s2, LIST).length;
    const b = await launch(s1, { agent: 'echo', task: 'seen by the restorer' });
    await until(() => got(s2, LIST).length > after, 30_000, 'list_changed of the adopted session\'s launch');
    expect((await s2.client.listResources()).resources.map((x) => x.name)).toContain(b.runId);
    await waitTerminal(s1, b.runId);

    // gc removes ended runs from Redis: the lists of the sessions that saw them change.
    const beforeGc = got(s2, LIST).length;
    const gc = cliStream(['gc', '--redis', redis.url, '--older-than', '0ms'], { SUBAGENTS_HOME: path.join(t.base, 'cli-home') });
    streams.push(gc);
    expect(await gc.exited, gc.stderr()).toBe(0);
    await until(() => got(s2, LIST).length > beforeGc, 30_000, 'list_changed after gc');
    expect((await s2.client.listResources()).resources.map((x) => x.name)).not.toContain(b.runId);
  }, 180_000);
});

describe.skipIf(skipped)('the dashboard over Redis', () => {
  it('lists the deployment\'s runs, shows a run page, its output and events, announces changes, and cancels', async () => {
    const s = await server();
    const done = await launch(s, { agent: 'echo', task: 'shown on the dashboard' });
    await waitTerminal(s, done.runId);
    const ui = await startUi({ SUBAGENTS_HOME: path.join(t.base, 'cli-home'), SUBAGENTS_REDIS_URL: redis.url });
    uis.push(ui);
    const auth = { Authorization: `Bearer ${ui.token}` };
    const get = async (p: string) => { const r = await fetch(`${ui.base}${p}`, { headers: auth }); return { status: r.status, body: await r.json() as Record<string, any> }; };

    const list = await get('/api/runs?all=1');
    expect(list.status).toBe(200);
    const row = list.body.trees.map((x: { run: Record<string, any> }) => x.run).find((r: { runId: string }) => r.runId === done.runId);
    expect(row).toMatchObject({ runId: done.runId, sessionId: done.sessionId, state: 'completed', mode: 'single', agents: ['echo'], depth: 0 });
    const page = await get(`/api/runs/${done.runId}`);
    expect(page.status).toBe(200);
    expect(page.body.steps).toEqual([expect.objectContaining({ key: '0', agent: 'echo', state: 'completed', exitCode: 0 })]);
    expect(page.body.events.map((e: { type: string }) => e.type)).toEqual(['accepted', 'started', 'step-started', 'step-ended', 'ended']);
    const out = await get(`/api/runs/${done.runId}/output?step=0`);
    expect(out.body).toMatchObject({ key: '0', text: 'shown on the dashboard', from: 0 });
    expect((await get('/api/runs/r-AAAAAAAAAAAAAAAAAAAAAAAA')).status).toBe(404);

    // Server-sent events: a launch elsewhere is announced as a change naming the run.
    const ac = new AbortController();
    const stream = await fetch(`${ui.base}/api/events`, { headers: auth, signal: ac.signal });
    let events = '';
    const reading = (async () => {
      const decoder = new TextDecoder();
      for await (const chunk of stream.body as unknown as AsyncIterable<Uint8Array>) events += decoder.decode(chunk);
    })().catch(() => {});
    await until(() => events.includes('event: hello'), 30_000, 'the event stream\'s hello');
    const live = await launch(s, { agent: 'sleeper', task: 'cancelled from the dashboard' });
    await until(() => events.includes(live.runId), 30_000, 'a change naming the new run');
    await until(async () => (await get(`/api/runs/${live.runId}`)).body.run?.state === 'running', 60_000, 'the run running');

    // Cancel is a POST from the page's origin, as locally.
    const refused = await fetch(`${ui.base}/api/runs/${live.runId}/cancel`, { method: 'POST', headers: auth });
    expect(refused.status).toBe(403);
    const c = await fetch(`${ui.base}/api/runs/${live.runId}/cancel`, { method: 'POST', headers: { ...auth, Origin: ui.base } });
    expect(c.status).toBe(200);
    expect(await c.json()).toMatchObject({ runId: live.runId, state: 'cancelled' });
    await until(async () => (await get('/api/runs?state=cancelled')).body.trees.some((x: { run: { runId: string } }) => x.run.runId === live.runId), 30_000, 'the cancelled run listed so');
    ac.abort();
    await reading;
  }, 180_000);

  it('the dashboard tool (MCP App) shows the session\'s runs from Redis, and no other session\'s', async () => {
    const s1 = await server();
    const s2 = await server();
    const mine = await launch(s1, { agent: 'echo', task: 'in the app' });
    await waitTerminal(s1, mine.runId);
    const theirs = await launch(s2, { agent: 'echo', task: 'not in the app' });
    await waitTerminal(s2, theirs.runId);
    const list = await s1.call('dashboard', {});
    expect(list.isError, textOf(list)).toBeFalsy();
    expect(sc(list).trees.map((x: { run: { runId: string } }) => x.run.runId)).toEqual([mine.runId]);
    expect(textOf(list)).toContain(mine.runId);
    const page = await s1.call('dashboard', { view: 'run', runId: mine.runId });
    expect(sc(page).steps).toEqual([expect.objectContaining({ key: '0', agent: 'echo', state: 'completed' })]);
    const out = await s1.call('dashboard', { view: 'output', runId: mine.runId, step: '0' });
    expect(sc(out).text).toBe('in the app');
    const other = await s1.call('dashboard', { view: 'run', runId: theirs.runId });
    expect(other.isError).toBe(true);
    expect(textOf(other)).toMatch(/^RUN_NOT_FOUND: /);
  }, 120_000);
});
