import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLAUDE_ROOT_WARNING, definitionWarnings } from '../../src/manager/agent-list.js';
import { cli } from '../cli/helpers.js';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { sc, startServer, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

describe('agents: delegate: true on a backend that cannot delegate', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome('sa-agent-list-');
    const dir = path.join(t.home, 'agents');
    writeAgent(dir, 'pi-deleg', { backend: 'pi', delegate: true });
    writeAgent(dir, 'cmd-deleg', { backend: 'command', command: ['node', FAKE, 'echo'], delegate: true });
    writeAgent(dir, 'claude-deleg', { backend: 'claude', delegate: true });
    writeAgent(dir, 'pi-plain', { backend: 'pi' });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
  });
  afterAll(async () => {
    await s?.close();
    t?.cleanup();
  });

  it('is a warning on that agent entry (it stays launchable); backends that can delegate, or no delegate, have none', async () => {
    const r = await s.call('agents', {});
    expect(r.isError).toBeFalsy();
    const byName = Object.fromEntries(sc(r).agents.map((a: any) => [a.name, a]));
    for (const [name, backend] of [['pi-deleg', 'pi'], ['cmd-deleg', 'command']] as const) {
      expect(byName[name].warnings, name).toEqual([
        `delegate: true is ignored: the ${backend} backend cannot be given this server as an MCP server, so this agent cannot launch runs of its own. Remove delegate, or use a backend that supports it (claude, codex, gemini, opencode).`,
      ]);
    }
    expect(byName['cmd-deleg'].available).toBe(true);
    expect(byName['claude-deleg'].warnings).toBeUndefined();
    expect(byName['pi-plain'].warnings).toBeUndefined();
    // A warning is not a refusal: the file is listed, not refused.
    expect(sc(r).refused).toEqual([]);
  });

  it('doctor prints the warning under the agent', async () => {
    const d = await cli(['doctor'], { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
    expect(d.stdout).toMatch(/pi-deleg \(pi, [^)]*\)[^\n]*\n\s+warning: delegate: true is ignored: the pi backend/);
    expect(d.stdout).not.toMatch(/claude-deleg[^\n]*\n\s+warning:/);
  });
});

describe('agents: a claude agent at full under root', () => {
  const here = (uid: number | undefined, env: Record<string, string> = {}) => ({ uid, agentEnv: () => env });
  const claude = (permissions: 'read-only' | 'edit' | 'full', tools?: string[]) => ({ backend: 'claude' as const, delegate: false, permissions, ...(tools ? { tools } : {}) });

  it('is warned about only where Claude would refuse it: uid 0, bypassPermissions, no IS_SANDBOX=1 reaching it', () => {
    expect(definitionWarnings(claude('full'), here(0))).toEqual([CLAUDE_ROOT_WARNING]);
    expect(definitionWarnings(claude('full'), here(1000))).toEqual([]);
    // Windows has no uid.
    expect(definitionWarnings(claude('full'), here(undefined))).toEqual([]);
    // With a tools list, full approves the list instead of bypassing: Claude runs it as root.
    expect(definitionWarnings(claude('full', ['Read', 'Bash(git *)']), here(0))).toEqual([]);
    expect(definitionWarnings(claude('edit'), here(0))).toEqual([]);
    expect(definitionWarnings(claude('full'), here(0, { IS_SANDBOX: '1' }))).toEqual([]);
    // Claude accepts only "1".
    expect(definitionWarnings(claude('full'), here(0, { IS_SANDBOX: 'true' }))).toEqual([CLAUDE_ROOT_WARNING]);
    expect(definitionWarnings({ ...claude('full'), backend: 'gemini' }, here(0))).toEqual([]);
  });

  describe('through the agents tool and doctor, as this process runs', () => {
    const root = process.getuid?.() === 0;
    let t: ReturnType<typeof tempStateHome>;
    let s: Started;
    let env: Record<string, string>;
    beforeAll(async () => {
      t = tempStateHome('sa-agent-list-root-');
      const dir = path.join(t.home, 'agents');
      writeAgent(dir, 'claude-full', { backend: 'claude', permissions: 'full' });
      writeAgent(dir, 'claude-full-tools', { backend: 'claude', permissions: 'full', tools: 'Read, Bash(git *)' });
      writeAgent(dir, 'claude-edit', { backend: 'claude', permissions: 'edit' });
      writeAgent(dir, 'claude-full-sandbox', { backend: 'claude', permissions: 'full', env: ['IS_SANDBOX'] });
      env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, IS_SANDBOX: '1' };
      s = await startServer(env);
    });
    afterAll(async () => {
      await s?.close();
      t?.cleanup();
    });

    it(`warns on claude-full only${root ? ' (uid 0 here)' : ' when run as root (not here: no warning)'}; it stays launchable`, async () => {
      const r = await s.call('agents', {});
      const byName = Object.fromEntries(sc(r).agents.map((a: any) => [a.name, a]));
      expect(byName['claude-full'].warnings).toEqual(root ? [CLAUDE_ROOT_WARNING] : undefined);
      for (const name of ['claude-full-tools', 'claude-edit', 'claude-full-sandbox']) expect(byName[name].warnings, name).toBeUndefined();
      expect(sc(r).refused).toEqual([]);

      const d = await cli(['doctor'], env);
      if (root) {
        expect(d.stdout).toMatch(/claude-full \(claude, [^)]*\)[^\n]*\n\s+warning: permissions: full runs Claude Code with --permission-mode=bypassPermissions/);
        expect(d.stdout).toContain('warning: running as root: Claude Code refuses permissions: full (bypassPermissions) under root, so every run of claude-full fails here (see agents)');
      } else {
        expect(d.stdout).not.toContain('running as root');
      }
      expect(d.stdout).not.toMatch(/claude-(edit|full-tools|full-sandbox) \([^\n]*\n\s+warning:/);
    });
  });
});
