import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliEnv } from '../cli/helpers.js';
import { FIXTURE_AGENTS, MAIN_JS } from '../helpers/paths.js';
import { sc, startServer, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { startUi, type UiProcess } from './ui-process.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

/**
 * The `ui` process over a home with damage in it, asked through its API as a script would (bearer token), no browser:
 * damage is named and the rest goes on, a bad query is answered, and a start that fails ends the process.
 */
describe('subagents-mcp ui: damage and bad requests', { timeout: 120_000 }, () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let done: string;
  const uis: UiProcess[] = [];
  const ui = async () => { const u = await startUi({ SUBAGENTS_HOME: t.home }); uis.push(u); return u; };
  /** A GET with the bearer token, bounded: a request the process never answers fails the test instead of hanging it. */
  const get = async (u: UiProcess, p: string) => {
    const r = await fetch(`${u.base}${p}`, { headers: { Authorization: `Bearer ${u.token}` }, signal: AbortSignal.timeout(10_000) });
    return { status: r.status, body: await r.json() as Record<string, any> };
  };

  beforeAll(async () => {
    t = tempStateHome('sa-ui-server-');
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
    const r = await s.call('launch', { agent: 'echo', task: 'hello', label: 'an echo' });
    done = sc(r).runId as string;
    await waitTerminal(s, done);
  });
  afterAll(async () => {
    for (const u of uis) await u.stop();
    await s?.close();
    t.cleanup();
  });

  it('a FIFO where a step\'s output goes is named STATE_CORRUPT, and the dashboard goes on answering', async () => {
    const u = await ui();
    const file = path.join(t.home, 'runs', done, 'out', '0.txt');
    const kept = fs.readFileSync(file);
    fs.rmSync(file);
    execFileSync('mkfifo', ['-m', '600', file]);
    try {
      const r = await get(u, `/api/runs/${done}/output?step=0`);
      expect(r.status).toBe(500);
      expect(r.body.error.code).toBe('STATE_CORRUPT');
      expect(r.body.error.message).toContain('not a regular file');
      expect((await get(u, '/api/runs')).status).toBe(200);
    } finally {
      fs.rmSync(file);
      fs.writeFileSync(file, kept, { mode: 0o600 });
    }
  });

  it('the output route takes a negative or odd byte count as the default, and serves the page\'s paths under its secret path', async () => {
    const u = await ui();
    for (const bytes of ['-5', '0', 'x', '1e400']) {
      const r = await get(u, `/api/runs/${done}/output?step=0&bytes=${bytes}`);
      expect(r.status, bytes).toBe(200);
      expect(r.body.text).toContain('hello');
    }
    // The page's path without its last slash (where the cookie is not sent) redirects to it.
    const bare = await fetch(u.page.slice(0, -1), { redirect: 'manual', signal: AbortSignal.timeout(10_000) });
    expect(bare.status).toBe(308);
    expect(bare.headers.get('location')).toBe(new URL(u.page).pathname);
    const under = await get(u, `${new URL(u.page).pathname}api/runs/${done}`);
    expect(under.status).toBe(200);
    expect(under.body.run.runId).toBe(done);
  });

  it('a damaged row in the dashboard\'s row cache is read from its run instead, and not written back', async () => {
    for (const other of uis.splice(0)) await other.stop(); // none of them may write the cache meanwhile
    const first = await ui();
    const cache = path.join(t.home, 'cache', 'ui-rows.json');
    await expect.poll(() => fs.existsSync(cache), { timeout: 30_000 }).toBe(true);
    await first.stop();
    const v = JSON.parse(fs.readFileSync(cache, 'utf8')) as { v: number; rows: Array<Record<string, unknown>> };
    const row = v.rows.find((r) => r.runId === done)!;
    row.agents = null;
    row.label = 42;
    fs.writeFileSync(cache, JSON.stringify(v), { mode: 0o600 });
    const u = await ui();
    const list = await get(u, '/api/runs');
    expect(list.status).toBe(200);
    expect(JSON.stringify(list.body)).toContain('"label":"an echo"');
    const detail = await get(u, `/api/runs/${done}`);
    expect(detail.body.run.agents).toEqual(['echo']);
    const cachedAgents = () => (JSON.parse(fs.readFileSync(cache, 'utf8')) as typeof v).rows.find((r) => r.runId === done)?.agents;
    await expect.poll(cachedAgents, { timeout: 30_000 }).toEqual(['echo']);
  });

  it('HEAD of the event stream answers its headers and ends; --port takes decimal digits only', async () => {
    const u = await ui();
    const head = await fetch(`${u.base}/api/events`, { method: 'HEAD', headers: { Authorization: `Bearer ${u.token}` }, signal: AbortSignal.timeout(10_000) });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-type')).toContain('text/event-stream');
    for (const port of ['0x10', '1e3', '-1', '65536', '']) {
      const r = spawnSync(process.execPath, [MAIN_JS, 'ui', '--no-open', '--port', port], { env: cliEnv({ SUBAGENTS_HOME: t.home }), encoding: 'utf8', timeout: 20_000 });
      expect(r.status, port).toBe(2);
      expect(r.stderr).toContain('is not a port number (0-65535)');
    }
  });

  it('a port in use: the process says so and exits, whatever the home holds', async () => {
    // A used home with nothing in it: the feed's watch on runs/ starts before the listen fails.
    const empty = tempStateHome('sa-ui-port-');
    fs.mkdirSync(path.join(empty.home, 'runs'), { mode: 0o700 });
    const busy = net.createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()));
    const port = (busy.address() as net.AddressInfo).port;
    try {
      const child = spawn(process.execPath, [MAIN_JS, 'ui', '--no-open', '--port', String(port)], { env: cliEnv({ SUBAGENTS_HOME: empty.home }), stdio: ['ignore', 'pipe', 'pipe'] });
      let err = '';
      child.stderr.on('data', (c: Buffer) => { err += c.toString(); });
      const code = await Promise.race([
        new Promise<number | null>((r) => child.on('exit', (c) => r(c))),
        new Promise<'running'>((r) => setTimeout(() => r('running'), 20_000)),
      ]);
      child.kill('SIGKILL');
      expect(code, err).not.toBe('running');
      expect(code).not.toBe(0);
      expect(err).toContain(`port ${port}`);
    } finally {
      busy.close();
      empty.cleanup();
    }
  });
});
