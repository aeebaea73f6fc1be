import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
