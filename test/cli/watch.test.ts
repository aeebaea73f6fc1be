import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { sc, startServer, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { cli, cliStream } from './helpers.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

interface Line { cursor: string; type: string; runId: string; [k: string]: unknown }

const lines = (text: string): Line[] => text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Line);
const key = (c: string) => { const [ts, run, off] = c.split('.'); return [Number(ts), run!, Number(off)] as const; };
const before = (a: string, b: string) => {
  const [x, y] = [key(a), key(b)];
  return x[0] !== y[0] ? x[0] < y[0] : x[1] !== y[1] ? x[1] < y[1] : x[2] < y[2];
};

/** `watch` as a real process over runs a real server launches. */
describe('subagents-mcp watch', { timeout: 180_000 }, () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let env: Record<string, string>;
  const streams: Array<ReturnType<typeof cliStream>> = [];
  const watch = (args: string[]) => { const w = cliStream(['watch', ...args], env); streams.push(w); return w; };
  const launch = async (args: Record<string, unknown>) => {
    const r = await s.call('launch', args);
    if (r.isError) throw new Error(JSON.stringify(r.content));
    return sc(r).runId as string;
  };

  beforeAll(async () => {
    t = tempStateHome('sa-watch-');
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    env = { SUBAGENTS_HOME: t.home };
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
  });
  afterAll(async () => {
    for (const w of streams) w.child.kill('SIGTERM');
    await s?.close();
    t.cleanup();
  });

  it('prints each run event once, in order, and resumes after a cursor without duplicates or gaps', async () => {
    // --since an age: the home is new, so this replays nothing, yet the runs below are printed whole even when watch's
    // first look at the home comes after they were created (without --since a run found there is followed from then on).
    const w = watch(['--json', '--since', '10m']);
    const a = await launch({ agent: 'echo', task: 'one', label: 'first <b>run</b>' });
    await waitTerminal(s, a);
    const b = await launch({ chain: [{ agent: 'echo', task: 'two' }, { parallel: [{ agent: 'echo', task: 'x' }, { agent: 'echo', task: 'y' }] }] });
    await waitTerminal(s, b);
    await w.waitFor(`"runId":"${b}"`);
    await expect.poll(() => lines(w.stdout()).filter((l) => l.runId === b && l.type === 'ended').length, { timeout: 30_000 }).toBe(1);
    const all = lines(w.stdout());
    // Each run's lifecycle, in the order it happened.
    const typesOf = (id: string) => all.filter((l) => l.runId === id).map((l) => l.type);
    expect(typesOf(a)).toEqual(['created', 'launched', 'started', 'step-started', 'step-ended', 'ended']);
    expect(typesOf(b).filter((x) => x === 'step-ended')).toHaveLength(3);
    expect(typesOf(b)[0]).toBe('created');
    expect(typesOf(b).at(-1)).toBe('ended');
    expect(new Set(all.map((l) => l.cursor)).size).toBe(all.length);
    for (let i = 1; i < all.length; i++) if (all[i - 1]!.runId === all[i]!.runId) expect(before(all[i - 1]!.cursor, all[i]!.cursor)).toBe(true);

    // Resume after a's step-ended line (written before a's terminal status, so before b was launched): exactly the
    // lines after it in the home's order (a's last one or two, all of b's), then what happens next, once. (a's own
    // "ended" line follows its terminal status and may be ordered after b's first lines.)
    const cut = all.find((l) => l.runId === a && l.type === 'step-ended')!.cursor;
    const after = all.filter((l) => before(cut, l.cursor)).sort((x, y) => (before(x.cursor, y.cursor) ? -1 : 1));
    expect(after.filter((l) => l.runId === b)).toHaveLength(all.filter((l) => l.runId === b).length);
    const r = watch(['--json', '--since', cut]);
    await r.waitFor(`"runId":"${b}"`);
    await expect.poll(() => lines(r.stdout()).length, { timeout: 30_000 }).toBe(after.length);
    expect(lines(r.stdout()).map((l) => l.cursor)).toEqual(after.map((l) => l.cursor));
    const c = await launch({ agent: 'echo', task: 'three' });
    await waitTerminal(s, c);
    await expect.poll(() => lines(r.stdout()).filter((l) => l.runId === c && l.type === 'ended').length, { timeout: 30_000 }).toBe(1);
    await expect.poll(() => lines(w.stdout()).filter((l) => l.runId === c && l.type === 'ended').length, { timeout: 30_000 }).toBe(1);
    const resumed = lines(r.stdout());
    expect(new Set(resumed.map((l) => l.cursor)).size).toBe(resumed.length);
    expect(resumed.filter((l) => l.runId === c).map((l) => l.cursor)).toEqual(lines(w.stdout()).filter((l) => l.runId === c).map((l) => l.cursor));
    expect(resumed.filter((l) => l.runId === a).map((l) => l.type)).toEqual(['ended']);

    // The whole history, from the start.
    const h = watch(['--json', '--since', 'start']);
    await h.waitFor(`"runId":"${c}"`);
    await expect.poll(() => lines(h.stdout()).filter((l) => l.type === 'ended').length, { timeout: 30_000 }).toBe(3);
    expect(lines(h.stdout())[0]!.runId).toBe(a);
  });

  it('goes on when a run is removed under it (gc), and prints people a line with its cursor', async () => {
    const w = watch(['--since', '10m']); // the runs below are printed even if watch looks at the home after they ended
    const a = await launch({ agent: 'echo', task: 'soon gone' });
    await waitTerminal(s, a);
    await w.waitFor(`${a}  ended`);
    fs.rmSync(path.join(t.home, 'runs', a), { recursive: true, force: true });
    const b = await launch({ agent: 'echo', task: 'after the removal' });
    await waitTerminal(s, b);
    await w.waitFor(`${b}  ended`);
    const line = w.stdout().split('\n').find((l) => l.includes(`${b}  step-ended`))!;
    expect(line).toMatch(/step 0 echo completed exit 0 {2}@\d+\.r-[A-Za-z0-9_-]{24}\.\d+$/);
    expect(w.done).toBe(false);
  });

  it('refuses a malformed --since with a usage error', async () => {
    const r = await cli(['watch', '--since', 'yesterday-ish'], env);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('is not a cursor');
  });
});

/** `watch` on homes that are new, damaged, or whose lines reach it out of their time order. */
describe('subagents-mcp watch: a new home, a damaged line, lines read late', { timeout: 120_000 }, () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started | undefined;
  const streams: Array<ReturnType<typeof cliStream>> = [];
  const homes: Array<ReturnType<typeof tempStateHome>> = [];
  const servers: Started[] = [];
  const newHome = () => {
    const h = tempStateHome('sa-watch-new-');
    homes.push(h);
    writeAgent(path.join(h.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    writeAgent(path.join(h.home, 'agents'), 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    return h;
  };
  const serve = async (h: ReturnType<typeof tempStateHome>) => {
    const started = await startServer({ SUBAGENTS_HOME: h.home, SUBAGENTS_ROOTS: h.root });
    servers.push(started);
    return started;
  };
  beforeAll(async () => {
    t = newHome();
    s = await serve(t);
  });
  afterAll(async () => {
    for (const w of streams) w.child.kill('SIGTERM');
    for (const x of servers) await x.close();
    for (const h of homes) h.cleanup();
  });
  const watch = (args: string[], home = t.home) => { const w = cliStream(['watch', ...args], { SUBAGENTS_HOME: home }); streams.push(w); return w; };
  const launch = async (args: Record<string, unknown>, on = s!) => {
    const r = await on.call('launch', args);
    if (r.isError) throw new Error(JSON.stringify(r.content));
    return sc(r).runId as string;
  };

  it('on a home nothing was launched in yet, follows until the first run comes', async () => {
    const fresh = newHome();
    expect(fs.existsSync(path.join(fresh.home, 'runs'))).toBe(false);
    const w = watch(['--json'], fresh.home);
    await new Promise((r) => setTimeout(r, 1500)); // its first look and a poll: a watcher that gave up has exited
    expect(w.done, w.stderr()).toBe(false);
    const first = await serve(fresh);
    const a = await launch({ agent: 'echo', task: 'the first' }, first);
    await waitTerminal(first, a);
    await w.waitFor(`"runId":"${a}","sessionId"`);
    await expect.poll(() => lines(w.stdout()).filter((l) => l.runId === a && l.type === 'ended').length, { timeout: 30_000 }).toBe(1);
  });

  it('skips a line stamped before 1970, as any line that does not parse, and replays the rest', async () => {
    const a = await launch({ agent: 'echo', task: 'damaged later' });
    await waitTerminal(s!, a);
    fs.appendFileSync(path.join(t.home, 'runs', a, 'events.jsonl'), '{"ts":"1969-12-31T23:59:59.000Z","type":"garbled"}\n');
    const h = watch(['--json', '--since', 'start']);
    await expect.poll(() => lines(h.stdout()).filter((l) => l.runId === a && l.type === 'ended').length, { timeout: 30_000 }).toBe(1);
    expect(lines(h.stdout()).filter((l) => l.type === 'garbled')).toEqual([]);
    expect(h.stderr()).toBe('');
  });

  it('shows people a line\'s fields without control characters: a field cannot break the line or drive the terminal', async () => {
    const a = await launch({ agent: 'echo', task: 'fields' });
    await waitTerminal(s!, a);
    const odd = { ts: new Date().toISOString(), type: 'odd\u001b[2J', step: '0\nforged', state: 'x\r\u001b]0;title\u0007', error: 'E\nF', signal: 'S\u001b[1m' };
    fs.appendFileSync(path.join(t.home, 'runs', a, 'events.jsonl'), `${JSON.stringify(odd)}\n`);
    const h = watch(['--since', 'start']);
    await h.waitFor(' odd');
    await new Promise((r) => setTimeout(r, 1500)); // whatever else the hold releases
    expect(h.stdout()).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f]/);
    expect(h.stdout().split('\n').filter((l) => l.includes(a) && l.includes('forged'))).toHaveLength(1);
  });

  it('prints a line read after a later line of another run before that line (cursor order, so a resume misses nothing)', async () => {
    const x = await launch({ agent: 'sleeper', task: 'x' });
    const y = await launch({ agent: 'sleeper', task: 'y' });
    for (const id of [x, y]) await expect.poll(async () => sc(await s!.call('status', { runId: id })).state, { timeout: 30_000 }).toBe('running');
    const w = watch(['--json']);
    await new Promise((r) => setTimeout(r, 1500)); // following both
    // y's line is written first; x's, stamped 100 ms before it (a writer that took its time and then paused), after.
    const yMs = Date.now();
    fs.appendFileSync(path.join(t.home, 'runs', y, 'events.jsonl'), `${JSON.stringify({ ts: new Date(yMs).toISOString(), type: 'probe-y' })}\n`);
    await new Promise((r) => setTimeout(r, 300));
    fs.appendFileSync(path.join(t.home, 'runs', x, 'events.jsonl'), `${JSON.stringify({ ts: new Date(yMs - 100).toISOString(), type: 'probe-x' })}\n`);
    await w.waitFor('"type":"probe-x"');
    await w.waitFor('"type":"probe-y"');
    const probes = lines(w.stdout()).filter((l) => l.type.startsWith('probe-'));
    expect(probes.map((l) => l.type)).toEqual(['probe-x', 'probe-y']);
    // Resumed after x's line, y's comes.
    const r = watch(['--json', '--since', probes[0]!.cursor]);
    await r.waitFor('"type":"probe-y"');
    for (const id of [x, y]) await s!.call('cancel', { runId: id });
  });
});

/** `watch --redis` with nothing listening at the address: it says so on stderr, and Ctrl-C still ends it. */
describe('subagents-mcp watch --redis, Redis away', { timeout: 60_000 }, () => {
  it('says on stderr that Redis does not answer, and ends on SIGINT', async () => {
    const t = tempStateHome('sa-watch-away-');
    // A loopback port nobody listens on: bound, then closed.
    const port = await new Promise<number>((resolve) => {
      const srv = net.createServer().listen(0, '127.0.0.1', () => {
        const p = (srv.address() as net.AddressInfo).port;
        srv.close(() => resolve(p));
      });
    });
    const w = cliStream(['watch', '--redis', `redis://127.0.0.1:${port}`], { SUBAGENTS_HOME: t.home });
    try {
      for (let i = 0; i < 100 && !w.stderr().includes('Redis does not answer'); i++) await new Promise((r) => setTimeout(r, 100));
      expect(w.stderr()).toContain('Redis does not answer: the connection was refused (ECONNREFUSED)');
      expect(w.stderr()).not.toContain(String(port)); // the URL is a credential: never printed
      w.child.kill('SIGINT');
      const code = await Promise.race([w.exited, new Promise((r) => setTimeout(() => r('still running'), 10_000))]);
      expect(code).toBe(0);
      expect(w.stdout()).toBe('');
    } finally {
      w.child.kill('SIGKILL');
      t.cleanup();
    }
  });
});
