import { describe, expect, it } from 'vitest';
import { adapterFor } from '../../../src/agents/adapters/index.js';
import { MAX_TEXT_CHARS, TextBuffer, shortError } from '../../../src/agents/adapters/shared.js';
import { BACKENDS } from '../../../src/agents/types.js';

const NEVER_PASSED = ['NODE_OPTIONS', 'LD_PRELOAD', 'LD_LIBRARY_PATH', 'BASH_ENV', 'ENV', 'PYTHONSTARTUP', 'GIT_SSH_COMMAND'];

describe('adapter registry', () => {
  it('has an adapter for every backend, each with a parser except command', () => {
    for (const backend of BACKENDS) {
      const adapter = adapterFor(backend)!;
      expect(adapter.backend).toBe(backend);
      expect(Boolean(adapter.createParser)).toBe(backend !== 'command');
    }
  });

  it('passes no variable that changes how a program loads code', () => {
    for (const backend of BACKENDS) {
      const names = adapterFor(backend)!.credentialEnv;
      for (const name of names) {
        expect(NEVER_PASSED).not.toContain(name);
        expect(name.startsWith('DYLD_')).toBe(false);
        expect(name).toMatch(/^[A-Z][A-Z0-9_]*$/);
      }
    }
  });
});

describe('parser helpers', () => {
  it('bounds accumulated text and says how much was dropped', () => {
    const buf = new TextBuffer();
    const chunk = 'x'.repeat(1024 * 1024);
    for (let i = 0; i < 10; i++) buf.append(chunk);
    const text = buf.value();
    expect(text.length).toBeLessThan(MAX_TEXT_CHARS + 100);
    expect(text).toContain(`${10 * chunk.length - MAX_TEXT_CHARS} more characters of output dropped`);
  });

  it('makes error messages one short line without secrets', () => {
    const msg = shortError(`Error:\n  401 for key sk-ant-api03-abcdefghijklmnop, Authorization: Bearer abc.def.ghi123 api_key=supersecret99 ${'y'.repeat(500)}`);
    expect(msg).not.toMatch(/abcdefghijklmnop|abc\.def\.ghi123|supersecret99/);
    expect(msg).not.toContain('\n');
    expect(msg.length).toBeLessThanOrEqual(300);
  });

  it('ignores lines that are not JSON objects, whatever the backend', () => {
    for (const backend of BACKENDS.filter((b) => b !== 'command')) {
      const parser = adapterFor(backend)!.createParser!();
      for (const line of ['', 'Warning: something', '[1,2]', '{broken', 'null']) parser.onLine(line);
      expect(parser.finish(1).isError).toBe(true);
    }
  });
});
