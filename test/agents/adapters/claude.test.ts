import { writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { claudeAdapter, claudeRefusesAsRoot } from '../../../src/agents/adapters/claude.js';
import { DELEGATE, HOSTILE_TASK, contextOf, fixtureLines, flagValue, parse, removeScratchDirs } from './context.js';

afterAll(removeScratchDirs);

describe('claude adapter: invocation', () => {
  it('builds print mode with stream-json, the task on stdin and the body as an appended system prompt file', () => {
    const ctx = contextOf();
    writeFileSync(ctx.taskFile, HOSTILE_TASK);
    const inv = claudeAdapter.buildInvocation(ctx);
    expect(inv.taskVia).toBe('stdin');
    expect(inv.argv.slice(0, 5)).toEqual(['/opt/bin/cli', '-p', '--output-format=stream-json', '--verbose', `--append-system-prompt-file=${ctx.systemPromptFile}`]);
    expect(inv.argv.join(' ')).not.toContain(HOSTILE_TASK);
    expect(inv.argv).not.toContain(ctx.taskFile);
    // Every value is glued to its flag: nothing positional that a variadic option or the prompt slot could take.
    for (const arg of inv.argv.slice(1)) expect(arg.startsWith('-')).toBe(true);
  });

  it('names the model only when one is chosen', () => {
    expect(flagValue(claudeAdapter.buildInvocation(contextOf()).argv, '--model')).toBeUndefined();
    expect(flagValue(claudeAdapter.buildInvocation(contextOf({ model: 'inherit' })).argv, '--model')).toBeUndefined();
    expect(flagValue(claudeAdapter.buildInvocation(contextOf({ model: 'opus' })).argv, '--model')).toBe('opus');
    // A launch's pick (ctx.model) wins over the file's model.
    expect(flagValue(claudeAdapter.buildInvocation(contextOf({ model: 'opus' }, { model: 'sonnet' })).argv, '--model')).toBe('sonnet');
  });

  it('maps permissions onto permission modes and tool lists', () => {
    const ro = claudeAdapter.buildInvocation(contextOf({ permissions: 'read-only' })).argv;
    expect(flagValue(ro, '--permission-mode')).toBe('dontAsk');
    expect(flagValue(ro, '--tools')).toBe('Read,Grep,Glob,WebFetch,WebSearch');
    expect(flagValue(ro, '--disallowedTools')).toBe('Bash,Edit,Write,NotebookEdit');
    expect(ro).toContain('--strict-mcp-config');

    const edit = claudeAdapter.buildInvocation(contextOf({ permissions: 'edit' })).argv;
    expect(flagValue(edit, '--permission-mode')).toBe('acceptEdits');
    expect(flagValue(edit, '--tools')).toBeUndefined();

    const full = claudeAdapter.buildInvocation(contextOf({ permissions: 'full' })).argv;
    expect(flagValue(full, '--permission-mode')).toBe('bypassPermissions');
  });

  it('restricts to the listed tools (never only approves them), narrowed by read-only', () => {
    const edit = claudeAdapter.buildInvocation(contextOf({ tools: ['Read', 'Bash(git *)', 'mcp__x__y'] })).argv;
    expect(flagValue(edit, '--tools')).toBe('Read,Bash');
    expect(flagValue(edit, '--allowedTools')).toBe('Bash(git *)');
    expect(edit).toContain('--strict-mcp-config');
    // Not acceptEdits, which would also run `rm`, `mkdir`, `cp` in the working directory whatever the list says.
    expect(flagValue(edit, '--permission-mode')).toBe('dontAsk');

    // A listed edit tool is approved in the working directory, as acceptEdits would; a plain Bash is not approved.
    const edits = claudeAdapter.buildInvocation(contextOf({ tools: ['Read', 'Edit', 'Write', 'Bash', 'Bash(git *)'] })).argv;
    expect(flagValue(edits, '--tools')).toBe('Read,Edit,Write,Bash');
    expect(flagValue(edits, '--allowedTools')).toBe('Edit(./**),Bash(git *)');

    const ro = claudeAdapter.buildInvocation(contextOf({ permissions: 'read-only', tools: ['Read', 'Bash', 'Edit'] })).argv;
    expect(flagValue(ro, '--tools')).toBe('Read');
    expect(flagValue(ro, '--allowedTools')).toBeUndefined();

    const none = claudeAdapter.buildInvocation(contextOf({ tools: [] })).argv;
    expect(none).toContain('--tools=');
  });

  it('at full with a tools list, approves exactly the listed entries instead of bypassing permissions', () => {
    const full = claudeAdapter.buildInvocation(contextOf({ permissions: 'full', tools: ['Read', 'Edit', 'Bash(git *)', 'mcp__subagents__launch'] })).argv;
    // bypassPermissions would run any command once Bash is available; dontAsk refuses what is not approved.
    expect(flagValue(full, '--permission-mode')).toBe('dontAsk');
    expect(flagValue(full, '--tools')).toBe('Read,Edit,Bash');
    expect(flagValue(full, '--allowedTools')).toBe('Read,Edit,Bash(git *),mcp__subagents__launch');
    expect(full).toContain('--strict-mcp-config');
    expect(full.some((a) => a.startsWith('--disallowedTools'))).toBe(false);

    const none = claudeAdapter.buildInvocation(contextOf({ permissions: 'full', tools: [] })).argv;
    expect(flagValue(none, '--permission-mode')).toBe('dontAsk');
    expect(none).toContain('--tools=');
    expect(flagValue(none, '--allowedTools')).toBeUndefined();

    const delegating = claudeAdapter.buildInvocation(
      contextOf({ permissions: 'full', tools: ['Read'], delegate: true }, { delegateServer: DELEGATE }),
    ).argv;
    expect(flagValue(delegating, '--allowedTools')).toBe('Read,mcp__subagents');

    // Without a list, full is Claude's own bypass mode (which it refuses as root).
    expect(flagValue(claudeAdapter.buildInvocation(contextOf({ permissions: 'full' })).argv, '--permission-mode')).toBe('bypassPermissions');
    expect(claudeRefusesAsRoot('full', undefined)).toBe(true);
    expect(claudeRefusesAsRoot('full', ['Read'])).toBe(false);
    expect(claudeRefusesAsRoot('edit', undefined)).toBe(false);
  });

  it('gives the delegate server through an MCP config file and pre-approves its tools', () => {
    const ctx = contextOf({ delegate: true }, { delegateServer: DELEGATE });
    const inv = claudeAdapter.buildInvocation(ctx);
    expect(inv.files).toHaveLength(1);
    const file = inv.files![0]!;
    expect(file.path.startsWith(ctx.scratchDir)).toBe(true);
    expect(flagValue(inv.argv, '--mcp-config')).toBe(file.path);
    expect(JSON.parse(file.content)).toEqual({
      mcpServers: { subagents: { type: 'stdio', command: DELEGATE.command, args: DELEGATE.args, env: DELEGATE.env } },
    });
    expect(flagValue(inv.argv, '--allowedTools')).toBe('mcp__subagents');
    // The step secret stays in the 0600 file, never on argv.
    expect(inv.argv.join(' ')).not.toContain(DELEGATE.env.SUBAGENTS_BUDGET);
  });
});

describe('claude adapter: parser on recorded output', () => {
  it('reads the final text, usage and cost of a successful run', () => {
    const r = parse(claudeAdapter, fixtureLines('claude/success.jsonl'));
    expect(r).toEqual({
      text: 'Hello from the mock provider.',
      isError: false,
      usage: { inputTokens: 12, outputTokens: 7, cacheReadTokens: 3, cacheWriteTokens: 2 },
      costUsd: 0.000249,
    });
  });

  it('reports "Not logged in" as an error result', () => {
    const r = parse(claudeAdapter, fixtureLines('claude/not-logged-in.jsonl'), 1);
    expect(r.isError).toBe(true);
    expect(r.errorMessage).toBe('Not logged in · Please run /login');
    expect(r.costUsd).toBe(0);
  });

  it('treats a stream without a result line as an error', () => {
    const lines = fixtureLines('claude/success.jsonl').filter((l) => !l.includes('"type":"result"'));
    const r = parse(claudeAdapter, lines, 143);
    expect(r.isError).toBe(true);
    expect(r.errorMessage).toContain('without a result');
  });

  it('treats an error subtype without text as an error, naming it', () => {
    const r = parse(claudeAdapter, [JSON.stringify({ type: 'result', subtype: 'error_max_turns', is_error: false, num_turns: 5 })]);
    expect(r).toMatchObject({ isError: true, errorMessage: 'claude reported error_max_turns' });
  });
});
