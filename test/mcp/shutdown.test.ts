import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { pidsMentioning, readJson, until } from '../e2e/support.js';
import { FIXTURE_AGENTS, MAIN_JS } from '../helpers/paths.js';
import { sc, startServer } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

/**
 * Claude Code's stop sequence, exactly: SIGINT, SIGTERM 100 ms later, SIGKILL at 500 ms, stdin never closed. Sent to
 * a busy server (a run active, a status long-poll waiting on it, a launch in flight). What is checked is the state
 * afterwards, not the speed (bench/shutdown.mjs measures that over 50 rounds): the server is gone, the active run
 * keeps running, the launch in flight either started or is recorded failed with nothing of it running, no lock is
 * left, and the next server works at once.
 */
function rawServer(env: Record<string, string>) {
  const child = spawn(process.execPath, [MAIN_JS, 'serve'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  const waiting = new Map<number, (m: any) => void>();
  let buf = '';
  let stderr = '';
  let nextId = 1;
  child.stdout.on('data', (c: Buffer) => {
    buf += c.toString();
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
      const m = JSON.parse(buf.slice(0, i)) as { id?: number };
      buf = buf.slice(i + 1);
      if (m.id !== undefined) waiting.get(m.id)?.(m);
    }
  });
  child.stderr.on('data', (c: Buffer) => { stderr += c.toString(); });
  child.stdin.on('error', () => {});
  const exited = new Promise<{ code: number | null; signal: string | null; at: number }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, at: performance.now() })));
  const send = (m: Record<string, unknown>) => child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...m })}\n`);
  const request = (method: string, params: Record<string, unknown>) => {
    const id = nextId++;
    send({ id, method, params });
    return new Promise<any>((resolve) => waiting.set(id, resolve));
  };
  return { child, exited, send, request, stderr: () => stderr };
}

/** Every `*.lock` directory under the home. */
function lockDirs(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = path.join(dir, d.name);
    if (d.name.endsWith('.lock')) return [p];
    return d.isDirectory() ? lockDirs(p) : [];
  });
}

describe("Claude Code's stop sequence (SIGINT, SIGTERM +100 ms, SIGKILL at 500 ms, stdin open)", () => {
  const t = tempStateHome();
  afterAll(() => t.cleanup());

  it('a busy server: gone, runs keep running, the launch in flight is whole either way, no lock left, the next server works', async () => {
    const fake = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
    const gate = path.join(t.base, 'gate');
    writeAgent(path.join(t.home, 'agents'), 'held', { backend: 'command', command: ['node', fake, 'gate', gate] });
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', fake, 'echo'] });
    const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: t.base, SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_SESSION_ID: 'stop-sequence-session-01' };
    const s = rawServer(env);
    await s.request('initialize', { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'claude-code-like', version: '1' } });
    s.send({ method: 'notifications/initialized' });
    await s.request('tools/list', {});
    const active = (await s.request('tools/call', { name: 'launch', arguments: { agent: 'held', task: 'stay' } })).result.structuredContent.runId as string;
    void s.request('tools/call', { name: 'status', arguments: { runId: active, waitMs: 30_000, until: 'terminal' }, _meta: { progressToken: 7 } });
    const before = new Set(fs.readdirSync(path.join(t.home, 'runs')));
    void s.request('tools/call', { name: 'launch', arguments: { agent: 'echo', task: 'in flight' } });
    // The signal lands while that launch is under way (its run directory appears first).
    expect(await until(() => fs.readdirSync(path.join(t.home, 'runs')).some((id) => !before.has(id) && !id.startsWith('.')), 10_000, 2)).toBe(true);

    const t0 = performance.now();
    s.child.kill('SIGINT');
    const term = setTimeout(() => s.child.kill('SIGTERM'), 100);
    const kill = setTimeout(() => s.child.kill('SIGKILL'), 500);
    const e = await s.exited;
    clearTimeout(term);
    clearTimeout(kill);
    console.info(`stop sequence: exited ${e.signal ? `by ${e.signal}` : `with code ${e.code}`} ${Math.round(e.at - t0)} ms after SIGINT`);
    expect(s.stderr()).toContain('shutting down (SIGINT); runs keep running');

    // The active run keeps running: its runner and agent live on.
    expect(readJson(path.join(t.home, 'runs', active, 'status.json')).state).toBe('running');
    expect(pidsMentioning(path.join(t.home, 'runs', active)).length).toBeGreaterThan(0);
    // The launch in flight started or was abandoned whole: recorded failed (HANDSHAKE_FAILED) with nothing running.
    const inFlight = fs.readdirSync(path.join(t.home, 'runs')).find((id) => !before.has(id) && !id.startsWith('.'))!;
    const st = readJson(path.join(t.home, 'runs', inFlight, 'status.json'));
    if (st.state === 'failed') {
      expect(st.error.code).toBe('HANDSHAKE_FAILED');
      expect(await until(() => pidsMentioning(path.join(t.home, 'runs', inFlight)).length === 0, 5000)).toBe(true);
    } else {
      expect(['starting', 'running', 'completed']).toContain(st.state);
    }
    // No lock left by the server (a runner's own run lock, held for a moment, is not the server's).
    expect(lockDirs(t.home).filter((p) => !p.startsWith(path.join(t.home, 'runs', active)))).toEqual([]);

    // The next server of the session works at once: it reconciles what was left and launches.
    const next = await startServer(env);
    try {
      const r = await next.call('launch', { agent: 'echo', task: 'after the stop' });
      expect(r.isError).toBeFalsy();
      const fin = sc(await next.call('status', { runId: inFlight, waitMs: 20_000, until: 'terminal' }));
      expect(['completed', 'failed']).toContain(fin.state);
      fs.writeFileSync(gate, '');
      expect(sc(await next.call('status', { runId: active, waitMs: 20_000, until: 'terminal' })).state).toBe('completed');
    } finally {
      await next.close();
    }
  }, 60_000);
});
