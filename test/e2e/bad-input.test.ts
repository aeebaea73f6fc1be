import fs from 'node:fs';
import path from 'node:path';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INVALID_INPUT_CASES } from '../helpers/invalid-input.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { FAKE, runDirs } from './support.js';

/** Every path under `dir` (what a refused call must not add to). */
function tree(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const n of fs.readdirSync(d)) {
      const p = path.join(d, n);
      out.push(p);
      if (fs.lstatSync(p).isDirectory()) walk(p);
    }
  };
  walk(dir);
  return out.filter((p) => !p.endsWith('.lock')).sort();
}

describe('bad input: a clear coded refusal, nothing created on disk, the server still serving', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let outside: string;
  beforeAll(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    writeAgent(path.join(t.home, 'agents'), 'mybot', { backend: 'Claude' }); // refused: backends are lower case
    writeAgent(path.join(t.home, 'agents'), 'relcmd', { backend: 'command', command: ['./tools/run.sh'] });
    writeAgent(path.join(t.home, 'agents'), 'abscmd', { backend: 'command', command: ['/opt/missing/bin/runner'] });
    fs.writeFileSync(path.join(t.home, 'agents', 'tagged.md'), '---\nname: tagged\ndescription: !!js/function "x"\nbackend: command\n---\n', { mode: 0o600 });
    outside = path.join(t.base, 'outside');
    fs.mkdirSync(outside);
    fs.mkdirSync(path.join(t.root, 'sub'));
    fs.symlinkSync(outside, path.join(t.root, 'escape'));
    fs.symlinkSync(path.join(t.root, 'sub'), path.join(t.root, 'inside-link'));
    // No warm pool: its runners announce themselves in warm/ a second after the start, whatever the calls do, and
    // this suite checks that a refusal writes nothing.
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_WARM_RUNNERS: '0' });
    await s.call('status', {}); // the first listing builds the run index: done before any snapshot
  });
  afterAll(async () => {
    await s.close();
    t.cleanup();
  });

  /** Calls a tool that must refuse with `code`; checks the refusal's shape and that nothing was written. */
  async function refused(tool: string, args: Record<string, unknown>, code: string): Promise<string> {
    const before = tree(t.base);
    const r = await s.call(tool, args);
    const text = textOf(r);
    expect(r.isError, `${tool} ${JSON.stringify(args).slice(0, 120)} → ${text}`).toBe(true);
    expect(r.structuredContent).toBeUndefined();
    expect(text.startsWith(`${code}: `), `${tool} ${JSON.stringify(args).slice(0, 120)} → ${text.slice(0, 200)}`).toBe(true);
    expect(text).not.toMatch(/\n\s+at /); // no stack trace
    expect(tree(t.base)).toEqual(before);
    return text;
  }

  it('malformed arguments answer INVALID_INPUT', async () => {
    const cases: Array<[string, Record<string, unknown>]> = [
      ...INVALID_INPUT_CASES,
      ['launch', { task: 'x' }],
      ['launch', { agent: ['echo'], task: 'x' }],
      ['launch', { tasks: [{ agent: 'echo' }] }],
      ['launch', { chain: [{ agent: 'echo', task: 'x', parallel: [{ agent: 'echo', task: 'y' }] }] }],
      ['launch', { agent: 'echo', task: 'x', timeoutMs: -5 }],
      ['launch', { agent: 'echo', task: 'x', timeoutMs: 10 ** 12 }],
      ['launch', { agent: 'echo', task: 'x', cwd: 42 }],
      ['status', { waitMs: -1 }],
    ];
    for (const [tool, args] of cases) await refused(tool, args, 'INVALID_INPUT');
    // `arguments` that is no object at all: a refusal like the rest, not a JSON-RPC error dumping schema issues.
    for (const args of [[1, 2], 'text', 5, null]) {
      const r = await s.client.request({ method: 'tools/call', params: { name: 'launch', arguments: args as never } }, CallToolResultSchema);
      expect(r.isError, JSON.stringify(args)).toBe(true);
      expect(textOf(r)).toMatch(/^INVALID_INPUT: arguments must be a JSON object/);
    }
    expect(runDirs(t.home)).toEqual([]);
  });

  it('a task over 1 MiB answers INVALID_INPUT (2 MiB of ASCII; 1.2 MB of two-byte characters under the character limit)', async () => {
    const big = await refused('launch', { agent: 'echo', task: 'x'.repeat(2 * 1024 * 1024) }, 'INVALID_INPUT');
    expect(big).toMatch(/task/);
    const wide = await refused('launch', { agent: 'echo', task: 'é'.repeat(600_000) }, 'INVALID_INPUT');
    expect(wide).toMatch(/1200000 bytes.*1048576/);
    await refused('launch', { tasks: [{ agent: 'echo', task: 'ok' }, { agent: 'echo', task: 'é'.repeat(600_000) }] }, 'INVALID_INPUT');
    expect(runDirs(t.home)).toEqual([]);
  });

  it('an unknown agent answers UNKNOWN_AGENT', async () => {
    const text = await refused('launch', { agent: 'nope', task: 'x' }, 'UNKNOWN_AGENT');
    expect(text).toContain('nope');
    await refused('launch', { tasks: [{ agent: 'echo', task: 'x' }, { agent: 'missing', task: 'y' }] }, 'UNKNOWN_AGENT');
    await refused('launch', { agent: '../../etc/passwd', task: 'x' }, 'UNKNOWN_AGENT');
  });

  it('an agent whose file was refused: UNKNOWN_AGENT naming the file and why; a command not found: its whole path', async () => {
    const mybot = await refused('launch', { agent: 'mybot', task: 'x' }, 'UNKNOWN_AGENT');
    expect(mybot).toContain(`no agent named "mybot": its file ${JSON.stringify(path.join(t.home, 'agents', 'mybot.md'))} (home) was refused: backend`);
    // Refused before its name was read (a YAML tag): known by its file name.
    expect(await refused('launch', { agent: 'tagged', task: 'x' }, 'UNKNOWN_AGENT')).toContain(`its file ${JSON.stringify(path.join(t.home, 'agents', 'tagged.md'))} (home) was refused: front matter uses a YAML tag`);
    expect(await refused('launch', { agent: 'abscmd', task: 'x' }, 'AGENT_UNAVAILABLE')).toContain('command "/opt/missing/bin/runner" was not found or is not executable');
    expect(await refused('launch', { agent: 'relcmd', task: 'x' }, 'AGENT_UNAVAILABLE')).toContain('command "./tools/run.sh" is a relative path, which is never used');
    expect(runDirs(t.home)).toEqual([]);
  });

  it('a cwd outside the roots answers CWD_NOT_ALLOWED, including through a symlink inside a root', async () => {
    for (const cwd of ['..', '../outside', outside, '/', '/tmp', 'escape', 'escape/', 'sub/../../outside', 'does-not-exist']) {
      const text = await refused('launch', { agent: 'echo', task: 'x', cwd }, 'CWD_NOT_ALLOWED');
      expect(text).toContain(JSON.stringify(cwd)); // names what was asked
    }
    expect(runDirs(t.home)).toEqual([]);
  });

  it('run ids that are not ids (../../x and friends) answer RUN_NOT_FOUND from every tool that takes one', async () => {
    const ids = ['../../x', '../runs', 'r-../../x', `r-${'A'.repeat(24)}`, `r-${'A'.repeat(20)}/../x`, '%2e%2e%2fx', '.', 'ledger', 'r-AAAAAAAAAAAAAAAAAAAAAAAA\u0000'];
    for (const runId of ids) {
      await refused('status', { runId }, 'RUN_NOT_FOUND');
      await refused('status', { runId, waitMs: 1000 }, 'RUN_NOT_FOUND');
      await refused('cancel', { runId }, 'RUN_NOT_FOUND');
      await refused('dismiss', { runId, cancel: true }, 'RUN_NOT_FOUND');
      await refused('append', { runId, step: { agent: 'echo', task: 'x' } }, 'RUN_NOT_FOUND');
    }
  });

  it('a task starting with -- arrives verbatim on stdin and never on argv; a cwd inside a root (also via an inner symlink) is used', async () => {
    const task = '--version --help -rf / --task=x';
    const r = await s.call('launch', { agent: 'echo', task, cwd: 'inside-link' });
    expect(r.isError, textOf(r)).toBeFalsy();
    const fin = await waitTerminal(s, sc(r).runId);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe(task);
    expect(fin.cwd).toBe(fs.realpathSync(path.join(t.root, 'sub')));
    const err = fs.readFileSync(path.join(t.home, 'runs', fin.runId, 'out', '0.err'), 'utf8');
    expect(err).toContain('ARGV:["echo"]');
    expect(err).not.toContain('--version');
  });

  it('keeps serving after all of it', async () => {
    expect((await s.call('agents')).isError).toBeFalsy();
    const list = await s.call('status', {});
    expect(list.isError).toBeFalsy();
    expect(sc(list).runs.length).toBe(1); // only the one accepted launch
  });
});
