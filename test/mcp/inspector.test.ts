import { execFile } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAIN_JS, REPO, FIXTURE_AGENTS } from '../helpers/paths.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { INSTALL_TIMEOUT_MS } from '../helpers/install-clis.js';
import { inspector as inspectorCli, node24 } from '../helpers/node-lines.js';

/**
 * The MCP Inspector CLI (a client we did not write) against the built server: `--strict` lints the published schemas
 * for portability; exit codes are 0 on success, 5 when a tool answers isError. The Inspector asks for Node ≥ 22.19, so
 * it is installed into the test cache and run on Node 24 (test/helpers/node-lines.ts), not kept as a devDependency.
 */
let tool: { node: string; cli: string };

function inspector(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  const envArgs = Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`]);
  return new Promise((resolve) => {
    execFile(tool.node, [tool.cli, '--cli', ...args, ...envArgs], { cwd: REPO, timeout: 50_000, env: { ...process.env, NO_COLOR: '1' } },
      (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }));
  });
}

describe('MCP Inspector CLI', () => {
  let t: ReturnType<typeof tempStateHome>;
  let env: Record<string, string>;
  beforeAll(async () => {
    const [node, cli] = await Promise.all([node24(), inspectorCli()]);
    if (!cli.bin) throw new Error(`the MCP Inspector could not be installed: ${cli.problem}`);
    // Without Node 24 for this platform, the running Node (the Inspector mostly works on 20, unsupported).
    tool = { node: node.bin ?? process.execPath, cli: cli.bin };
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', path.join(FIXTURE_AGENTS, 'fake-agent.mjs'), 'echo'] });
    env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root };
  }, INSTALL_TIMEOUT_MS * 2);
  afterAll(() => t.cleanup());

  it('tools/list --strict exits 0', async () => {
    const r = await inspector(['node', MAIN_JS, '--method', 'tools/list', '--strict'], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('"launch"');
  });

  it('runs from mcp.json (--config mcp.json --server subagents) at the repo root', async () => {
    const r = await inspector(['--config', 'mcp.json', '--server', 'subagents', '--method', 'tools/list', '--format', 'json', '-q'], env);
    expect(r.code, r.stderr).toBe(0);
    const names = (JSON.parse(r.stdout) as { result: { tools: Array<{ name: string }> } }).result.tools.map((x) => x.name).sort();
    expect(names).toEqual(['agents', 'append', 'cancel', 'dashboard', 'dismiss', 'launch', 'restore', 'status']);
  });

  it('from mcp.json with --strict: no error-severity problem, and none at all in an input schema', async () => {
    const r = await inspector(['--config', 'mcp.json', '--server', 'subagents', '--method', 'tools/list', '--strict', '--format', 'json', '-q'], env);
    expect(r.code, r.stderr).toBe(0); // 6 on an error-severity problem
    expect(r.stderr).not.toMatch(/^Error/m);
    // What models are given is the input schemas: flat, portable. (The output schemas' nullable fields are warned about.)
    expect(r.stderr).not.toMatch(/Path: inputSchema/);
    const tools = (JSON.parse(r.stdout) as { result: { tools: Array<{ name: string; execution?: unknown }> } }).result.tools;
    expect(tools.find((x) => x.name === 'launch')!.execution).toEqual({ taskSupport: 'optional' });
  });

  it('from mcp.json: launch, then status waits for the end; structuredContent says what to do next', async () => {
    // Each Inspector call is a new server process: one session id makes the run visible to the second.
    const session = { ...env, SUBAGENTS_SESSION_ID: 'inspector-session-000001' };
    const call = async (tool: string, args: Record<string, unknown>) => {
      const r = await inspector(['--config', 'mcp.json', '--server', 'subagents', '--method', 'tools/call', '--tool-name', tool,
        '--tool-args-json', JSON.stringify(args), '--format', 'json', '-q'], session);
      expect(r.code, r.stdout + r.stderr).toBe(0);
      return (JSON.parse(r.stdout) as { result: { structuredContent: Record<string, any> } }).result.structuredContent;
    };
    const launched = await call('launch', { agent: 'echo', task: 'through the inspector' });
    expect(launched.next).toContain(`status { runId: "${launched.runId}"`);
    let v = await call('status', { runId: launched.runId, waitMs: 20_000, until: 'terminal' });
    while (v.state === 'starting' || v.state === 'running') v = await call('status', { runId: launched.runId, waitMs: 20_000, until: 'terminal' });
    expect(v).toMatchObject({ state: 'completed', output: { text: 'through the inspector' } });
    expect(v.next).toBe('Ended completed: the run\'s output is output.text.');
  });

  it('a tool call answers 0 on success and 5 on a refusal (isError)', async () => {
    const [ok, bad] = await Promise.all([
      inspector(['node', MAIN_JS, '--method', 'tools/call', '--tool-name', 'agents', '--format', 'json', '-q'], env),
      inspector(['node', MAIN_JS, '--method', 'tools/call', '--tool-name', 'launch', '--tool-args-json', '{"agent":"nope","task":"x"}', '--format', 'json', '-q'], env),
    ]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toContain('"echo"');
    expect(bad.code, bad.stdout + bad.stderr).toBe(5);
    expect(bad.stdout).toContain('UNKNOWN_AGENT');
  });
});
