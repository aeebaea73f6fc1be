import { writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { CONFIG_FILE, opencodeAdapter, permissionConfig } from '../../../src/agents/adapters/opencode.js';
import { DELEGATE, HOSTILE_TASK, contextOf, fixtureLines, flagValue, parse, removeScratchDirs } from './context.js';

afterAll(removeScratchDirs);

describe('opencode adapter: invocation', () => {
  it('builds `opencode run --format json` with the task on stdin and no message on argv', () => {
    const ctx = contextOf({ backend: 'opencode' });
    writeFileSync(ctx.taskFile, HOSTILE_TASK);
    const inv = opencodeAdapter.buildInvocation(ctx);
    expect(inv.taskVia).toBe('stdin');
    expect(inv.argv).toEqual(['/opt/bin/cli', 'run', '--format', 'json']);
    expect(inv.argv.join(' ')).not.toContain(HOSTILE_TASK);
  });

  it('delivers the body as an instructions file of an OPENCODE_CONFIG file', () => {
    const ctx = contextOf({ backend: 'opencode' });
    const inv = opencodeAdapter.buildInvocation(ctx);
    const file = inv.files!.find((f) => f.path.endsWith(CONFIG_FILE))!;
    expect(inv.env?.OPENCODE_CONFIG).toBe(file.path);
    expect(JSON.parse(file.content).instructions).toEqual([ctx.systemPromptFile]);
  });

  it('maps permissions onto OPENCODE_PERMISSION, naming every built-in tool', () => {
    const ro = JSON.parse(opencodeAdapter.buildInvocation(contextOf({ backend: 'opencode', permissions: 'read-only' })).env!.OPENCODE_PERMISSION!);
    expect(Object.keys(ro)[0]).toBe('*');
    expect(ro).toMatchObject({ '*': 'deny', bash: 'deny', edit: 'deny', task: 'deny', grep: 'allow', webfetch: 'allow' });
    expect(ro.read).toEqual({ '*': 'allow', '*.env': 'deny', '*.env.*': 'deny', '*.env.example': 'allow' });

    const edit = permissionConfig('edit', undefined, false)!;
    expect(edit).toMatchObject({ edit: 'allow', bash: 'deny' });

    const full = opencodeAdapter.buildInvocation(contextOf({ backend: 'opencode', permissions: 'full' }));
    expect(full.argv).toContain('--auto');
    expect(full.env!.OPENCODE_PERMISSION).toBeUndefined();
  });

  it('restricts to the listed tools at every level (write/patch count as edit)', () => {
    expect(permissionConfig('full', ['read', 'write', 'bash'], false)).toMatchObject({ '*': 'deny', edit: 'allow', bash: 'allow', grep: 'deny' });
    expect(permissionConfig('read-only', ['read', 'bash'], false)).toMatchObject({ bash: 'deny', grep: 'deny' });
    expect(permissionConfig('edit', ['mytool'], false)).toMatchObject({ '*': 'deny', read: 'deny' });
    expect(permissionConfig('edit', ['mytool'], false)).not.toHaveProperty('mytool');
    expect(permissionConfig('full', ['mytool'], false)).toMatchObject({ mytool: 'allow', read: 'deny' });
  });

  it('restricts a tool listed with a pattern to that pattern, where the level allows the tool', () => {
    const full = permissionConfig('full', ['read', 'Bash(git *)', 'bash(npm test)'], false)!;
    // Last match wins: "*" denies first, the patterns allow after it.
    expect(full.bash).toEqual({ '*': 'deny', 'git *': 'allow', 'npm test': 'allow' });
    expect(Object.keys(full.bash as object)[0]).toBe('*');
    expect(full).toMatchObject({ '*': 'deny', edit: 'deny' });
    // A plain entry grants the whole tool.
    expect(permissionConfig('full', ['bash', 'bash(git *)'], false)!.bash).toBe('allow');
    // A level that forbids the tool drops it, pattern or not.
    expect(permissionConfig('edit', ['read', 'bash(git *)'], false)!.bash).toBe('deny');
    expect(permissionConfig('edit', ['edit(src/**)'], false)!.edit).toEqual({ '*': 'deny', 'src/**': 'allow' });
    expect(permissionConfig('full', ['mytool(x)'], false)!.mytool).toEqual({ '*': 'deny', x: 'allow' });
  });

  it('names the model only when one is chosen', () => {
    expect(flagValue(opencodeAdapter.buildInvocation(contextOf({ backend: 'opencode', model: 'inherit' })).argv, '--model')).toBeUndefined();
    expect(flagValue(opencodeAdapter.buildInvocation(contextOf({ backend: 'opencode', model: 'anthropic/claude-sonnet-4-5' })).argv, '--model')).toBe('anthropic/claude-sonnet-4-5');
  });

  it('adds the delegate server to the config file and allows its tools', () => {
    const inv = opencodeAdapter.buildInvocation(contextOf({ backend: 'opencode', permissions: 'read-only', delegate: true }, { delegateServer: DELEGATE }));
    const config = JSON.parse(inv.files![0]!.content);
    expect(config.mcp).toEqual({
      subagents: { type: 'local', command: [DELEGATE.command, ...DELEGATE.args], environment: DELEGATE.env, enabled: true },
    });
    expect(JSON.parse(inv.env!.OPENCODE_PERMISSION!)['subagents_*']).toBe('allow');
    expect(inv.argv.join(' ') + JSON.stringify(inv.env)).not.toContain(DELEGATE.env.SUBAGENTS_BUDGET);
  });
});

describe('opencode adapter: parser on recorded output', () => {
  it('reads the text, tokens and cost of a successful run', () => {
    expect(parse(opencodeAdapter, fixtureLines('opencode/success.jsonl'))).toEqual({
      text: 'Hello from the mock provider.',
      isError: false,
      usage: { inputTokens: 12, outputTokens: 7, cacheReadTokens: 3, cacheWriteTokens: 2 },
      costUsd: 0.0001494,
    });
  });

  it('reports an error event', () => {
    const r = parse(opencodeAdapter, fixtureLines('opencode/error.jsonl'), 1);
    expect(r).toMatchObject({ isError: true, errorMessage: 'Unexpected server error. Check server logs for details.' });
  });

  it('reports a run that printed nothing', () => {
    expect(parse(opencodeAdapter, [], null)).toMatchObject({ isError: true });
  });

  it('keeps the text of the last step that spoke and sums every step', () => {
    const step = (reason: string, text?: string) => [
      JSON.stringify({ type: 'step_start', part: { type: 'step-start' } }),
      ...(text ? [JSON.stringify({ type: 'text', part: { type: 'text', text } })] : []),
      JSON.stringify({ type: 'step_finish', part: { reason, tokens: { input: 5, output: 1, reasoning: 1, cache: { read: 0, write: 0 } }, cost: 0.5 } }),
    ];
    const r = parse(opencodeAdapter, [...step('tool-calls', 'Looking.'), ...step('tool-calls'), ...step('stop', 'Done.')]);
    expect(r).toEqual({ text: 'Done.', isError: false, usage: { inputTokens: 15, outputTokens: 6, cacheReadTokens: 0, cacheWriteTokens: 0 }, costUsd: 1.5 });
  });
});
