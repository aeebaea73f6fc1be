/**
 * Node 20's code cache of the server (src/server-load.ts): the bundled bin compiles dist/server.cjs with a V8 code
 * cache kept in `$XDG_CACHE_HOME/subagents-mcp/v8-code-cache`, written once the client is quiet. A damaged, foreign or
 * symlinked cache file costs the speed-up, never the start: the server answers, and a fresh cache replaces the file
 * (a symlink is replaced, its target never written). On Node ≥ 22.1 Node's own compile cache serves instead.
 */
import fs from 'node:fs';
import module from 'node:module';
import path from 'node:path';
import vm from 'node:vm';
import { afterAll, describe, expect, it } from 'vitest';
import { until } from '../helpers/runs.js';
import { FIXTURE_AGENTS, REPO } from '../helpers/paths.js';
import { sc, startServer, textOf } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const nodeHasCompileCache = typeof (module as { enableCompileCache?: unknown }).enableCompileCache === 'function';
const bundled = fs.existsSync(path.join(REPO, 'dist', 'server.cjs'));

describe.skipIf(nodeHasCompileCache || !bundled)('the server\'s V8 code cache on Node 20', () => {
  const t = tempStateHome();
  afterAll(() => t.cleanup());
  const xdg = path.join(t.base, 'xdg');
  const dir = path.join(xdg, 'subagents-mcp', 'v8-code-cache');
  const env = { HOME: t.base, XDG_CACHE_HOME: xdg, SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root };
  writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', path.join(FIXTURE_AGENTS, 'fake-agent.mjs'), 'echo'] });

  const cacheFiles = () => (fs.existsSync(dir) ? fs.readdirSync(dir).filter((n) => n.startsWith('server-') && n.endsWith('.v8cache')) : []);

  /** Starts a server, checks that it answers (tools/list, and `agents`, which loads the YAML parser beside the bundle). */
  async function serveOnce(): Promise<Awaited<ReturnType<typeof startServer>>> {
    const s = await startServer(env);
    expect((await s.client.listTools()).tools.map((x) => x.name)).toContain('launch');
    const r = await s.call('agents', {});
    expect(r.isError, textOf(r)).toBeFalsy();
    expect((sc(r) as { agents: Array<{ name: string }> }).agents.map((a) => a.name), JSON.stringify(sc(r).refused)).toContain('echo');
    expect(s.stderr()).not.toMatch(/Warning|Error/);
    return s;
  }

  /** Puts `content` (a Buffer, or a symlink's target) in place of the cache file, starts a server, waits for a fresh cache. */
  async function replacedAfterStart(put: (file: string) => void, differs: (file: string) => boolean): Promise<void> {
    const [name] = cacheFiles();
    const file = path.join(dir, name!);
    fs.rmSync(file);
    put(file);
    const s = await serveOnce();
    try {
      expect(await until(() => fs.lstatSync(file, { throwIfNoEntry: false })?.isFile() === true && differs(file), 30_000)).toBe(true);
    } finally {
      await s.close();
    }
    expect(fs.lstatSync(file).mode & 0o777).toBe(0o600);
    expect(cacheFiles()).toEqual([name]);
  }

  it('is written once the client is quiet, private (directory 0700, file 0600)', async () => {
    const s = await serveOnce();
    try {
      expect(await until(() => cacheFiles().length === 1, 30_000)).toBe(true);
    } finally {
      await s.close();
    }
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    expect(fs.statSync(path.join(dir, cacheFiles()[0]!)).mode & 0o777).toBe(0o600);
    const again = await serveOnce(); // with the cache
    await again.close();
  });

  it('a damaged cache file: the server answers, and a fresh cache replaces it', async () => {
    const junk = Buffer.alloc(4096, 0x5a);
    await replacedAfterStart((f) => fs.writeFileSync(f, junk, { mode: 0o600 }), (f) => !fs.readFileSync(f).equals(junk));
  });

  it('a foreign cache (another source\'s code): refused by V8, the server answers, and a fresh cache replaces it', async () => {
    const foreign = new vm.Script('globalThis.notTheServer = 1;').createCachedData();
    await replacedAfterStart((f) => fs.writeFileSync(f, foreign, { mode: 0o600 }), (f) => !fs.readFileSync(f).equals(foreign));
  });

  it('a symlink in place of the cache file is not followed: the server answers, the target stays as it was', async () => {
    const target = path.join(t.base, 'elsewhere');
    fs.writeFileSync(target, 'not a cache', { mode: 0o600 });
    await replacedAfterStart((f) => fs.symlinkSync(target, f), () => true);
    expect(fs.readFileSync(target, 'utf8')).toBe('not a cache');
  });
});
