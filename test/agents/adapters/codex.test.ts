import { writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { codexAdapter, tomlString } from '../../../src/agents/adapters/codex.js';
import { DELEGATE, HOSTILE_TASK, contextOf, fixtureLines, flagValue, parse, removeScratchDirs } from './context.js';

afterAll(removeScratchDirs);

/** The values of every `-c key=value` override. */
function overrides(argv: string[]): string[] {
  return argv.flatMap((a, i) => (a === '-c' ? [argv[i + 1]!] : []));
}

describe('codex adapter: invocation', () => {
  it('builds `codex exec --json … -` with the task on stdin and `-` last', () => {
    const ctx = contextOf({ backend: 'codex' });
    writeFileSync(ctx.taskFile, HOSTILE_TASK);
    const inv = codexAdapter.buildInvocation(ctx);
    expect(inv.taskVia).toBe('stdin');
    expect(inv.argv.slice(0, 3)).toEqual(['/opt/bin/cli', 'exec', '--json']);
    expect(inv.argv.at(-1)).toBe('-');
    expect(inv.argv).toContain('--skip-git-repo-check');
    expect(inv.argv.join(' ')).not.toContain(HOSTILE_TASK);
    expect(overrides(inv.argv)).toContain('approval_policy="never"');
  });

  it('appends the body as developer_instructions, TOML-quoted', () => {
    const body = 'Line "one"\n\tback\\slash \u007f --flag';
    const argv = codexAdapter.buildInvocation(contextOf({ backend: 'codex', body })).argv;
    expect(overrides(argv)).toContain(`developer_instructions=${tomlString(body)}`);
    expect(tomlString(body)).toBe('"Line \\"one\\"\\n\\tback\\\\slash \\u007F --flag"');
    expect(overrides(codexAdapter.buildInvocation(contextOf({ backend: 'codex', body: '  ' })).argv).join()).not.toContain('developer_instructions');
  });

  it('maps permissions onto the sandbox', () => {
    const sandbox = (permissions: 'read-only' | 'edit' | 'full') =>
      flagValue(codexAdapter.buildInvocation(contextOf({ backend: 'codex', permissions })).argv, '--sandbox');
    expect(sandbox('read-only')).toBe('read-only');
    expect(sandbox('edit')).toBe('workspace-write');
    expect(sandbox('full')).toBe('danger-full-access');
  });

  it('names the model only when one is chosen', () => {
    expect(flagValue(codexAdapter.buildInvocation(contextOf({ backend: 'codex', model: 'inherit' })).argv, '--model')).toBeUndefined();
    expect(flagValue(codexAdapter.buildInvocation(contextOf({ backend: 'codex', model: 'gpt-5.5' })).argv, '--model')).toBe('gpt-5.5');
  });

  it('refuses a tools list it cannot enforce', () => {
    expect(() => codexAdapter.buildInvocation(contextOf({ backend: 'codex', tools: ['shell'] }))).toThrow(/cannot restrict tools/);
    // …and says so up front, so `agents` shows it unavailable and launch answers AGENT_UNAVAILABLE before any spawn.
    expect(codexAdapter.unsupported!(contextOf({ backend: 'codex', tools: ['shell'] }).agent)).toMatch(/cannot restrict tools/);
    expect(codexAdapter.unsupported!(contextOf({ backend: 'codex' }).agent)).toBeNull();
  });

  it('adds the delegate server by config override, passing its environment by name only', () => {
    const argv = codexAdapter.buildInvocation(contextOf({ backend: 'codex', delegate: true }, { delegateServer: DELEGATE })).argv;
    expect(overrides(argv)).toEqual(
      expect.arrayContaining([
        'mcp_servers.subagents.command="/usr/bin/node"',
        'mcp_servers.subagents.args=["/opt/subagents-mcp/dist/main.js", "serve"]',
        'mcp_servers.subagents.env_vars=["SUBAGENTS_HOME", "SUBAGENTS_BUDGET"]',
      ]),
    );
    expect(argv.join(' ')).not.toContain(DELEGATE.env.SUBAGENTS_BUDGET);
  });
});

describe('codex adapter: parser on recorded output', () => {
  it('reads the agent message and usage of a completed turn, ignoring transient error events', () => {
    expect(parse(codexAdapter, fixtureLines('codex/success.jsonl'))).toEqual({
      text: 'Hello from the mock provider.',
      isError: false,
      usage: { inputTokens: 12, outputTokens: 7, cacheReadTokens: 3, cacheWriteTokens: 0 },
    });
  });

  it('reports turn.failed', () => {
    const r = parse(codexAdapter, fixtureLines('codex/turn-failed.jsonl'), 1);
    expect(r.isError).toBe(true);
    expect(r.errorMessage).toBe('unexpected status 401 Unauthorized: invalid x-api-key, url: http://127.0.0.1:18080/v1/responses');
  });

  it('reports a run killed before its turn ended, with the last error', () => {
    const r = parse(codexAdapter, fixtureLines('codex/offline-killed.jsonl'), null);
    expect(r.isError).toBe(true);
    expect(r.errorMessage).toContain('Reconnecting... waiting for network');
  });
});
