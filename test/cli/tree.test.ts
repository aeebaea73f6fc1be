import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { sc, startServer, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { cli } from './helpers.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
const DELEGATE = path.join(FIXTURE_AGENTS, 'delegating-agent.mjs');

/** A run tree (an agent that delegated through its own MCP client) seen and collected by the CLI as one unit. */
describe('the CLI and run trees', { timeout: 180_000 }, () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome('sa-cli-tree-');
    const dir = path.join(t.home, 'agents');
    writeAgent(dir, 'delegate', { backend: 'command', command: ['node', DELEGATE, 'delegate'], delegate: true });
    writeAgent(dir, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
  });
  afterAll(async () => {
    await s?.close();
    t.cleanup();
  });

  it('runs shows nested runs under their parent, --session finds them, show lists children, gc removes the tree whole', async () => {
    const env = { SUBAGENTS_HOME: t.home };
    const plan = { launches: [{ agent: 'echo', task: 'from the child' }], wait: true };
    const l = await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    const root = sc(l).runId as string;
    const session = sc(l).sessionId as string;
    expect((await waitTerminal(s, root)).state).toBe('completed');

    const listed = JSON.parse((await cli(['runs', '--json', '--session', session], env)).stdout).runs as any[];
    const child = listed.find((r) => r.depth === 1);
    expect(child).toMatchObject({ parentRunId: root, rootRunId: root, state: 'completed', agents: ['echo'] });
    expect(listed.map((r) => r.runId)).toContain(root);
    const table = (await cli(['runs'], env)).stdout;
    expect(table).toMatch(new RegExp(`${child.runId}\\s+completed.*in ${root.slice(0, 12)}`));
    const detail = JSON.parse((await cli(['show', root, '--json'], env)).stdout);
    expect(detail.children).toEqual([child.runId]);
    expect(detail.steps[0].children).toEqual([child.runId]);
    expect((await cli(['logs', child.runId], env)).stdout).toBe('from the child\n');

    // Retention counts from the tree's latest end: an old root with a recent child stays.
    const age = (id: string) => {
      const f = path.join(t.home, 'runs', id, 'status.json');
      const st = JSON.parse(fs.readFileSync(f, 'utf8'));
      st.endedAt = new Date(Date.now() - 40 * 86_400_000).toISOString();
      fs.writeFileSync(f, JSON.stringify(st));
    };
    age(root);
    const kept = JSON.parse((await cli(['gc', '--json'], env)).stdout);
    expect(kept.removed).toEqual([]);
    expect(kept.keptRecent).toBe(1);
    age(child.runId);
    const gc = await cli(['gc'], env);
    expect(gc.code).toBe(0);
    expect(gc.stdout).toContain(`removed ${root} with 1 nested run(s)`);
    expect(fs.existsSync(path.join(t.home, 'runs', root))).toBe(false);
    expect(fs.existsSync(path.join(t.home, 'runs', child.runId))).toBe(false);
    expect((await cli(['runs'], env)).stdout).toContain('no runs in');
  });
});
