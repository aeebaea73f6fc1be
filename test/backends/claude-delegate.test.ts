import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { MAIN_JS } from '../helpers/paths.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { liveRunProcesses, readLedger, readRun, runIds, until } from '../nesting/tree-helpers.js';
import { FAKE_AGENT, FAKE_CLAUDE, FIXTURE_BIN, callFor, claudeCalls, flag, pathWith } from './helpers.js';

/**
 * `delegate: true` through the fake claude: the claude adapter writes an MCP config naming this server with the
 * nesting variables; the fake CLI starts that server as an MCP client (as Claude Code does), launches nested runs
 * and waits for them. The tree's children, fan-out budget and depth limit hold across the CLI boundary.
 */

interface Report {
  reply: string | null;
  error?: string;
  launches: Array<{ isError: boolean; text: string; structured: any }>;
  finals: Array<{ runId: string; state: string; output: string; error: unknown }>;
}

describe('delegate: true through the fake claude CLI', () => {
  let t: ReturnType<typeof tempStateHome>;
  let claudeDir: string;
  const servers: Started[] = [];
  const setup = (extra: Record<string, string> = {}) => {
    t = tempStateHome('sa-claude-nest-');
    claudeDir = path.join(t.base, 'claude-config');
    fs.mkdirSync(claudeDir, { mode: 0o700 });
    const agents = path.join(t.home, 'agents');
    // Read-only (the default) on purpose: the delegate tools are pre-approved even where nothing else is.
    writeAgent(agents, 'lead', { backend: 'claude', delegate: true }, 'You split work and delegate it.');
    writeAgent(agents, 'solo', { backend: 'claude' }, 'You do not delegate.');
    writeAgent(agents, 'echo', { backend: 'command', command: ['node', FAKE_AGENT, 'echo'] });
    writeAgent(agents, 'envdump', { backend: 'command', command: ['node', FAKE_AGENT, 'env'] });
    return { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300', CLAUDE_CONFIG_DIR: claudeDir, ANTHROPIC_API_KEY: 'sk-ant-fake-0000000000', ...extra };
  };
  const start = async (env: Record<string, string>) => {
    const s = await startServer(env);
    servers.push(s);
    return s;
  };
  afterEach(async () => {
    for (const s of servers.splice(0)) await s.close();
    for (const pid of liveRunProcesses(t.home)) { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } }
    t.cleanup();
  });

  it('children appear in the parent step, are charged to its fan-out budget, and their output comes back in its result', async () => {
    const s = await start(setup({ PATH: pathWith(FIXTURE_BIN), SUBAGENTS_MAX_SPAWNS_PER_RUN: '4', SUBAGENTS_MAX_ACTIVE_RUNS: '1' }));
    const plan = {
      reply: 'delegated [d1]',
      launches: [
        { agent: 'echo', task: 'child one' },
        { tasks: [{ agent: 'echo', task: 'member a' }, { agent: 'echo', task: 'member b' }] },
        // The budget of 4 is spent (the lead itself, 1 + 2 children): refused, all or nothing.
        { agent: 'echo', task: 'one too many' },
      ],
      wait: true,
    };
    const l = await s.call('launch', { agent: 'lead', task: JSON.stringify(plan) });
    expect(l.isError, textOf(l)).toBeFalsy();
    const rootId = sc(l).runId as string;
    const fin = await waitTerminal(s, rootId);
    expect(fin.state, JSON.stringify(fin.error)).toBe('completed');
    const rep = JSON.parse(fin.output.text) as Report;
    expect(rep.error).toBeUndefined();
    expect(rep.launches.map((x) => x.isError)).toEqual([false, false, true]);
    expect(rep.launches[2]!.text).toMatch(/^FANOUT_EXHAUSTED: /);
    // Nested launches are not charged to the active-run capacity (1, held by the root).
    expect(rep.launches[0]!.structured.capacity.active).toBe(1);
    expect(rep.finals.map((f) => f.state)).toEqual(['completed', 'completed']);
    expect(rep.finals[0]!.output).toBe('child one');
    expect(rep.finals[1]!.output).toMatch(/^### echo #0\s+member a\s+### echo #1\s+member b\s*$/);

    // The parent's status: the children under the step that launched them, the budget spent, usage and cost parsed.
    const childIds = rep.launches.slice(0, 2).map((x) => x.structured.runId as string);
    expect([...fin.steps[0].children].sort()).toEqual([...childIds].sort());
    expect(fin.fanout).toEqual({ used: 4, limit: 4, remaining: 0 });
    expect(fin.steps[0]).toMatchObject({ state: 'completed', costUsd: 0.000249, usage: { inputTokens: 12, outputTokens: 7 } });
    for (const id of childIds) {
      const { record } = readRun(t.home, id);
      expect(record).toMatchObject({ rootRunId: rootId, parentRunId: rootId, depth: 1 });
    }
    // Refused before anything was written: the root and the two admitted children only.
    expect(runIds(t.home)).toHaveLength(3);

    // What the adapter gave the CLI: an MCP config file in the step's private scratch dir naming this server with the
    // nesting variables (the step secret only in that 0600 file, never on argv), and its tools pre-approved.
    const call = callFor(claudeDir, '[d1]');
    const configPath = flag(call.argv, '--mcp-config')!;
    expect(configPath.startsWith(path.join(t.home, 'runs', rootId))).toBe(true);
    expect(flag(call.argv, '--allowedTools')).toBe('mcp__subagents');
    expect(call.argv).toContain('--strict-mcp-config');
    const entry = call.mcpConfig!.mcpServers.subagents!;
    expect(entry).toMatchObject({ type: 'stdio', command: process.execPath });
    expect(entry.args).toHaveLength(2);
    expect([fs.realpathSync(entry.args[0]!), entry.args[1]]).toEqual([fs.realpathSync(MAIN_JS), 'serve']);
    expect(Object.keys(entry.env).sort()).toEqual(['SUBAGENTS_BUDGET', 'SUBAGENTS_DEPTH', 'SUBAGENTS_HOME', 'SUBAGENTS_PARENT_RUN_ID', 'SUBAGENTS_ROOT_RUN_ID', 'SUBAGENTS_RUN_TOKEN']);
    expect(entry.env).toMatchObject({ SUBAGENTS_DEPTH: '1', SUBAGENTS_PARENT_RUN_ID: rootId, SUBAGENTS_ROOT_RUN_ID: rootId, SUBAGENTS_HOME: t.home });
    expect(call.argv.join(' ')).not.toContain(entry.env.SUBAGENTS_BUDGET!);
    expect(call.mcpConfigMode).toBe('600');

    // Every slot and claim comes back once the tree has ended (the cap of 1 active run is free again).
    await until(() => { const g = readLedger(t.home); return !Object.keys(g.roots).length && !Object.keys(g.trees).length && !Object.keys(g.agents).length; }, 'an empty ledger');

    // Without delegate: true the same CLI gets no MCP server at all.
    const l2 = await s.call('launch', { agent: 'solo', task: 'no delegation here [d2]' });
    await waitTerminal(s, sc(l2).runId);
    const solo = callFor(claudeDir, '[d2]');
    expect(flag(solo.argv, '--mcp-config')).toBeUndefined();
    expect(solo.mcpConfig).toBeNull();
  });

  it('a claude that delegates to a claude that delegates: DEPTH_EXCEEDED at the tree limit; the CLI (found through SUBAGENTS_BIN_CLAUDE only) and pass-through variables work at depth 2', async () => {
    // The fake CLI is not on PATH: every server of the tree, nested ones included, must find it as the root did.
    // An operator pass-through variable must reach agents at every depth (the tree's list, not the nested server's).
    const s = await start(setup({ PATH: pathWith(), SUBAGENTS_BIN_CLAUDE: FAKE_CLAUDE, SUBAGENTS_MAX_DEPTH: '2', SUBAGENTS_PASS_ENV: 'TEAM_*', TEAM_NOTE: 'kept-at-depth-2' }));
    const inner = { reply: 'inner [d4]', launches: [{ agent: 'echo', task: 'too deep' }], wait: true };
    const outer = { reply: 'outer [d3]', launches: [{ agent: 'lead', task: JSON.stringify(inner) }, { agent: 'envdump', task: 'x' }], wait: true };
    const l = await s.call('launch', { agent: 'lead', task: JSON.stringify(outer) });
    expect(l.isError, textOf(l)).toBeFalsy();
    const fin = await waitTerminal(s, sc(l).runId);
    expect(fin.state, JSON.stringify(fin.error)).toBe('completed');
    const rep = JSON.parse(fin.output.text) as Report;
    expect(rep.launches.map((x) => x.isError), rep.launches[0]!.text).toEqual([false, false]);
    expect(rep.finals.map((f) => f.state)).toEqual(['completed', 'completed']);
    const dumped = JSON.parse(rep.finals[1]!.output).env as Record<string, string>;
    expect(dumped.SUBAGENTS_DEPTH).toBe('2');
    expect(dumped.TEAM_NOTE).toBe('kept-at-depth-2');
    const innerRep = JSON.parse(rep.finals[0]!.output) as Report;
    expect(innerRep.reply).toBe('inner [d4]');
    expect(innerRep.launches[0]!.isError).toBe(true);
    expect(innerRep.launches[0]!.text).toMatch(/^DEPTH_EXCEEDED: .*depth 2.*depth 3/);
    const innerCall = claudeCalls(claudeDir).find((c) => JSON.parse(c.task).reply === 'inner [d4]')!;
    expect(innerCall.mcpConfig!.mcpServers.subagents!.env.SUBAGENTS_DEPTH).toBe('2');
    expect(innerCall.argv[0]).toBe('-p');
    // Refused before anything was written: the root, the nested claude run and the env dump.
    expect(runIds(t.home)).toHaveLength(3);
    expect([...fin.steps[0].children].sort()).toEqual(rep.launches.map((x) => x.structured.runId).sort());
    expect(fin.fanout.used).toBe(3);
  });
});
