import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CONTEXT_FILE, SETTINGS_FILE, geminiAdapter } from '../../../src/agents/adapters/gemini.js';
import { firstInsecureAncestor } from '../../../src/agents/adapters/shared.js';
import type { FrozenAgent, InvocationContext } from '../../../src/agents/types.js';
import { DELEGATE, HOSTILE_TASK, contextOf, fixtureLines, flagValue, parse, privateScratchDir, removeScratchDirs } from './context.js';

const secure = firstInsecureAncestor(privateScratchDir()) === undefined;
afterAll(removeScratchDirs);

function ctxOf(agent: Partial<FrozenAgent> = {}, extra: Partial<InvocationContext> = {}): InvocationContext {
  return contextOf({ backend: 'gemini', ...agent }, { scratchDir: privateScratchDir(), ...extra });
}

function settingsOf(inv: ReturnType<typeof geminiAdapter.buildInvocation>): Record<string, any> {
  const file = inv.files!.find((f) => f.path.endsWith(SETTINGS_FILE))!;
  expect(inv.env).toEqual({ GEMINI_CLI_SYSTEM_SETTINGS_PATH: file.path });
  return JSON.parse(file.content);
}

describe.skipIf(!secure)('gemini adapter: invocation', () => {
  it('builds headless stream-json with the task on stdin and an empty -p', () => {
    const ctx = ctxOf();
    writeFileSync(ctx.taskFile, HOSTILE_TASK);
    const inv = geminiAdapter.buildInvocation(ctx);
    expect(inv.taskVia).toBe('stdin');
    expect(inv.argv).toEqual(['/opt/bin/cli', '--output-format', 'stream-json', '--skip-trust', '--approval-mode', 'auto_edit', '--prompt', '']);
    expect(inv.argv.join(' ')).not.toContain(HOSTILE_TASK);
  });

  it('delivers the body as a context file loaded from an include directory', () => {
    const ctx = ctxOf({ body: 'Be terse.' });
    const inv = geminiAdapter.buildInvocation(ctx);
    expect(inv.files).toContainEqual({ path: path.join(ctx.scratchDir, CONTEXT_FILE), content: 'Be terse.' });
    expect(settingsOf(inv).context).toEqual({ includeDirectories: [ctx.scratchDir], loadMemoryFromIncludeDirectories: true });
  });

  it('maps permissions onto approval modes, core allowlists and excludes', () => {
    const ro = geminiAdapter.buildInvocation(ctxOf({ permissions: 'read-only' }));
    expect(flagValue(ro.argv, '--approval-mode')).toBe('default');
    expect(settingsOf(ro).tools.core).toEqual(['read_file', 'read_many_files', 'list_directory', 'glob', 'grep_search', 'google_web_search', 'web_fetch']);
    expect(settingsOf(ro).tools.exclude).toEqual(expect.arrayContaining(['run_shell_command', 'write_file', 'replace']));

    const edit = geminiAdapter.buildInvocation(ctxOf({ permissions: 'edit' }));
    expect(settingsOf(edit).tools.core).toBeUndefined();
    expect(settingsOf(edit).tools.exclude).toEqual(['run_shell_command', 'invoke_agent']);

    const full = geminiAdapter.buildInvocation(ctxOf({ permissions: 'full' }));
    expect(flagValue(full.argv, '--approval-mode')).toBe('yolo');
    expect(settingsOf(full).tools).toEqual({ exclude: [] });
  });

  it('restricts to the listed tools, excluding every unlisted tool that writes', () => {
    const s = settingsOf(geminiAdapter.buildInvocation(ctxOf({ permissions: 'full', tools: ['read_file', 'run_shell_command'] })));
    expect(s.tools.core).toEqual(['read_file', 'run_shell_command']);
    expect(s.tools.exclude).toEqual(['write_file', 'replace', 'save_memory', 'invoke_agent']);
    const ro = settingsOf(geminiAdapter.buildInvocation(ctxOf({ permissions: 'read-only', tools: ['read_file', 'write_file'] })));
    expect(ro.tools.core).toEqual(['read_file']);
  });

  it('names the model only when one is chosen', () => {
    expect(flagValue(geminiAdapter.buildInvocation(ctxOf({ model: 'inherit' })).argv, '--model')).toBeUndefined();
    expect(flagValue(geminiAdapter.buildInvocation(ctxOf({ model: 'gemini-2.5-pro' })).argv, '--model')).toBe('gemini-2.5-pro');
  });

  it('adds the delegate server as a trusted MCP server in the settings file, not on argv', () => {
    const inv = geminiAdapter.buildInvocation(ctxOf({ permissions: 'read-only', delegate: true }, { delegateServer: DELEGATE }));
    const s = settingsOf(inv);
    expect(s.mcpServers).toEqual({ subagents: { command: DELEGATE.command, args: DELEGATE.args, env: DELEGATE.env, trust: true } });
    expect(s.tools.core).toContain('mcp_subagents_*');
    expect(inv.argv.join(' ')).not.toContain(DELEGATE.env.SUBAGENTS_BUDGET);
  });
});

describe('gemini adapter: refusal', () => {
  it('refuses a scratch dir below a world-writable directory, where Gemini would ignore its settings', () => {
    const ctx = contextOf({ backend: 'gemini' }, { scratchDir: '/tmp/some-step' });
    expect(() => geminiAdapter.buildInvocation(ctx)).toThrow(/writable directory \/tmp/);
  });
});

describe('gemini adapter: parser on recorded output', () => {
  it('reads the answer and the token stats of a successful run', () => {
    expect(parse(geminiAdapter, fixtureLines('gemini/success.jsonl'))).toEqual({
      text: 'Hello from the mock provider.',
      isError: false,
      usage: { inputTokens: 12, outputTokens: 7, cacheReadTokens: 3 },
    });
  });

  it('reports a result with status error', () => {
    const r = parse(geminiAdapter, fixtureLines('gemini/api-error.jsonl'), 1);
    expect(r.isError).toBe(true);
    expect(r.errorMessage).toContain('invalid x-api-key');
  });

  it('reports a run that printed nothing (no auth method: the reason is on stderr)', () => {
    expect(parse(geminiAdapter, [''], 41)).toMatchObject({ isError: true, errorMessage: 'gemini ended without a result (exit 41)', reasonUnknown: true });
  });

  it('keeps the text after the last tool call, like Gemini’s own JSON output', () => {
    const ev = (o: object) => JSON.stringify(o);
    const lines = [
      ev({ type: 'message', role: 'assistant', content: 'Let me look.', delta: true }),
      ev({ type: 'tool_use', tool_name: 'read_file', tool_id: 't1', parameters: {} }),
      ev({ type: 'tool_result', tool_id: 't1', status: 'success' }),
      ev({ type: 'message', role: 'assistant', content: 'Found ', delta: true }),
      ev({ type: 'message', role: 'assistant', content: 'it.', delta: true }),
      ev({ type: 'result', status: 'success', stats: { input_tokens: 10, output_tokens: 2, cached: 0, input: 10 } }),
    ];
    expect(parse(geminiAdapter, lines).text).toBe('Found it.');
    expect(parse(geminiAdapter, lines.slice(0, 3).concat(lines.slice(5))).text).toBe('Let me look.');
  });
});
