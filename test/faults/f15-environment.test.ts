/**
 * F15 — environment injection (SPEC §3). The server is started with a hostile environment: secrets, code-loading
 * variables (NODE_OPTIONS, LD_LIBRARY_PATH, BASH_ENV, GIT_SSH_COMMAND, PYTHONSTARTUP, DYLD_*), the server's own
 * settings, a test fault seam, and an operator SUBAGENTS_PASS_ENV that tries to pass code-loading variables through.
 * Expect: the agent's environment (dumped by the fake agent's `env` mode) is exactly the allowlist — base variables,
 * the pass-through set, the agent file's own `env` names, the nesting variables and the system-prompt path — and
 * nothing else. Agent files that name LD_PRELOAD, NODE_OPTIONS and the like in `env` are refused when loaded, and
 * the `agents` tool says which and why; launching them is refused.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { FAKE } from './fault-helpers.js';

const SENTINEL = 'SENTINEL-ENV-91c2';

describe('F15 environment', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  const hostile: Record<string, string> = {
    AWS_SECRET_ACCESS_KEY: SENTINEL,
    ANTHROPIC_BASE_URL: 'http://attacker.invalid',
    NODE_OPTIONS: '--no-deprecation', // harmless for the server itself; must never reach an agent
    LD_LIBRARY_PATH: '/nonexistent-lib',
    BASH_ENV: '/tmp/evil.sh',
    ENV: '/tmp/evil.sh',
    GIT_SSH_COMMAND: 'touch /tmp/pwned',
    PYTHONSTARTUP: '/tmp/evil.py',
    DYLD_INSERT_LIBRARIES: '/tmp/evil.dylib',
    SUBAGENTS_MAX_DEPTH: '3',
    SUBAGENTS_TEST_FAULT: 'none',
    SUBAGENTS_BUDGET: 'forged-budget',
    SUBAGENTS_PASS_ENV: 'LD_LIBRARY_PATH GIT_SSH_COMMAND OTHER_OK NODE_*',
  };
  const allowedExtra: Record<string, string> = {
    LANG: 'C.UTF-8', TZ: 'UTC', LC_ALL: 'C', XDG_CONFIG_HOME: '/tmp/xdg-config', OTHER_OK: 'passed-by-operator', MY_TOKEN: 'for-the-agent',
  };
  beforeAll(async () => {
    t = tempStateHome();
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'envdump', { backend: 'command', command: ['node', FAKE, 'env'], env: ['MY_TOKEN'] });
    for (const name of ['LD_PRELOAD', 'NODE_OPTIONS', 'DYLD_INSERT_LIBRARIES', 'GIT_SSH_COMMAND', 'BASH_ENV', 'SUBAGENTS_BUDGET']) {
      writeAgent(agents, `bad-${name.toLowerCase().replace(/_/g, '-')}`, { backend: 'command', command: ['node', FAKE, 'env'], env: ['MY_TOKEN', name] });
    }
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, ...hostile, ...allowedExtra });
  });
  afterAll(async () => {
    await s.close();
    t.cleanup();
  });

  it('the agent sees exactly the allowlist: no secret, no code-loading variable, no server setting', async () => {
    const r = await s.call('launch', { agent: 'envdump', task: 'x' });
    expect(r.isError, textOf(r)).toBeFalsy();
    const fin = await waitTerminal(s, sc(r).runId);
    expect(fin.state).toBe('completed');
    const { env } = JSON.parse(fin.output.text) as { env: Record<string, string> };

    const nesting = ['SUBAGENTS_HOME', 'SUBAGENTS_PARENT_RUN_ID', 'SUBAGENTS_ROOT_RUN_ID', 'SUBAGENTS_DEPTH', 'SUBAGENTS_BUDGET', 'SUBAGENTS_RUN_TOKEN', 'SUBAGENTS_SYSTEM_PROMPT_FILE'];
    const base = ['HOME', 'LOGNAME', 'PATH', 'SHELL', 'TERM', 'USER', 'TMPDIR'];
    const allowed = new Set([...base, ...Object.keys(allowedExtra), ...nesting]);
    const unexpected = Object.keys(env).filter((k) => !allowed.has(k));
    expect(unexpected).toEqual([]);
    for (const k of [...Object.keys(allowedExtra), ...nesting]) expect(env[k], k).toBeDefined();
    for (const [k, v] of Object.entries(allowedExtra)) expect(env[k]).toBe(v);
    expect(env.SUBAGENTS_BUDGET).not.toBe('forged-budget'); // the runner's own secret, never the server's variable
    expect(env.SUBAGENTS_DEPTH).toBe('1');
    expect(JSON.stringify(env)).not.toContain(SENTINEL);
    for (const k of Object.keys(hostile)) if (!k.startsWith('SUBAGENTS_')) expect(env[k], k).toBeUndefined();
  });

  it('agent files naming code-loading or reserved variables in env are refused on load, with the reason', async () => {
    const r = await s.call('agents', {});
    expect(r.isError, textOf(r)).toBeFalsy();
    const { agents, refused } = sc(r) as { agents: Array<{ name: string }>; refused: Array<{ name?: string; path: string; reason: string }> };
    expect(agents.map((a) => a.name)).toContain('envdump');
    expect(agents.map((a) => a.name).filter((n) => n.startsWith('bad-'))).toEqual([]);
    for (const name of ['LD_PRELOAD', 'NODE_OPTIONS', 'DYLD_INSERT_LIBRARIES', 'GIT_SSH_COMMAND', 'BASH_ENV', 'SUBAGENTS_BUDGET']) {
      const file = `bad-${name.toLowerCase().replace(/_/g, '-')}.md`;
      const entry = refused.find((x) => x.path.endsWith(file));
      expect(entry, file).toBeDefined();
      expect(entry!.reason).toContain(name);
      expect(entry!.reason).toMatch(/never passed|reserved/);
    }
    const l = await s.call('launch', { agent: 'bad-ld-preload', task: 'x' });
    expect(l.isError).toBe(true);
    expect(textOf(l)).toMatch(/^(UNKNOWN_AGENT|AGENT_UNAVAILABLE): /);
  });
});
