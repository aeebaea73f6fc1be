import { writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { piAdapter } from '../../../src/agents/adapters/pi.js';
import { HOSTILE_TASK, contextOf, fixtureLines, flagValue, parse, removeScratchDirs } from './context.js';

afterAll(removeScratchDirs);

describe('pi adapter: invocation', () => {
  it('builds `pi --mode json … -p` with the task on stdin and -p last', () => {
    const ctx = contextOf({ backend: 'pi' });
    writeFileSync(ctx.taskFile, HOSTILE_TASK);
    const inv = piAdapter.buildInvocation(ctx);
    expect(inv.taskVia).toBe('stdin');
    expect(inv.argv.slice(0, 5)).toEqual(['/opt/bin/cli', '--mode', 'json', '--append-system-prompt', ctx.systemPromptFile]);
    // pi takes the argument after -p as a message unless it starts with "-": nothing may follow it.
    expect(inv.argv.at(-1)).toBe('-p');
    expect(inv.argv.join(' ')).not.toContain(HOSTILE_TASK);
  });

  it('enforces the permission level with the tool allowlist', () => {
    const tools = (permissions: 'read-only' | 'edit' | 'full', list?: string[]) =>
      flagValue(piAdapter.buildInvocation(contextOf({ backend: 'pi', permissions, ...(list ? { tools: list } : {}) })).argv, '--tools');
    expect(tools('read-only')).toBe('read,grep,find,ls');
    expect(tools('edit')).toBe('read,grep,find,ls,edit,write');
    expect(tools('full')).toBeUndefined();
    expect(tools('read-only', ['Read', 'bash', 'write'])).toBe('read');
    expect(tools('full', ['read', 'bash'])).toBe('read,bash');
    expect(piAdapter.buildInvocation(contextOf({ backend: 'pi', tools: [] })).argv).toContain('--no-tools');
  });

  it('names the model only when one is chosen and has no delegate support', () => {
    expect(flagValue(piAdapter.buildInvocation(contextOf({ backend: 'pi', model: 'inherit' })).argv, '--model')).toBeUndefined();
    expect(flagValue(piAdapter.buildInvocation(contextOf({ backend: 'pi', model: 'anthropic/claude-sonnet-4-5' })).argv, '--model')).toBe('anthropic/claude-sonnet-4-5');
    expect(piAdapter.supportsDelegate).toBe(false);
  });
});

describe('pi adapter: parser on recorded output', () => {
  it('reads the last assistant message, usage and cost', () => {
    expect(parse(piAdapter, fixtureLines('pi/success.jsonl'))).toEqual({
      text: 'Hello from the mock provider.',
      isError: false,
      usage: { inputTokens: 12, outputTokens: 7, cacheReadTokens: 3, cacheWriteTokens: 2 },
      costUsd: 0.0001494,
    });
  });

  it('reports stopReason "error" although pi exits 0', () => {
    const r = parse(piAdapter, fixtureLines('pi/api-error.jsonl'), 0);
    expect(r.isError).toBe(true);
    expect(r.errorMessage).toContain('401');
    expect(r.errorMessage).toContain('invalid x-api-key');
  });

  it('reports the final error after retries', () => {
    const r = parse(piAdapter, fixtureLines('pi/offline-retries.jsonl'), 0);
    expect(r).toMatchObject({ isError: true, errorMessage: 'Connection error.' });
  });

  it('reports a run that produced no assistant message', () => {
    const r = parse(piAdapter, fixtureLines('pi/no-api-key.jsonl'), 1);
    expect(r.isError).toBe(true);
    expect(r.errorMessage).toContain('exit 1');
  });
});
