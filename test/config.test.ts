import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadSettings } from '../src/config.js';

/** Settings from flags and the environment (docs/contract.md, "Settings"). */
describe('loadSettings', () => {
  it('refuses a time limit no timer can hold (above 2^31 − 1 ms), naming the variable; the largest one is taken', () => {
    for (const env of ['SUBAGENTS_MAX_TIMEOUT_MS', 'SUBAGENTS_DEFAULT_TIMEOUT_MS', 'SUBAGENTS_QUEUE_TIMEOUT_MS']) {
      expect(() => loadSettings({ [env]: '2147483648' }), env).toThrow(`${env} must be between 100 and 2147483647, got 2147483648`);
    }
    const s = loadSettings({ SUBAGENTS_MAX_TIMEOUT_MS: '2147483647', SUBAGENTS_DEFAULT_TIMEOUT_MS: '2147483647', SUBAGENTS_QUEUE_TIMEOUT_MS: '2147483647' });
    expect([s.maxTimeoutMs, s.defaultTimeoutMs, s.queueTimeoutMs]).toEqual([2147483647, 2147483647, 2147483647]);
  });

  it('--root and --roots win over SUBAGENTS_ROOTS, together, and the source says flag', () => {
    const env = { SUBAGENTS_ROOTS: '/env/root' };
    const one = loadSettings(env, { '--root': ['/flag/b'] }, '/');
    expect(one.explicitRoots).toEqual(['/flag/b']);
    expect(one.sources.roots).toBe('flag');
    const both = loadSettings(env, { '--roots': `/flag/a${path.delimiter}/flag/c`, '--root': ['/flag/b'] }, '/');
    expect(both.explicitRoots).toEqual(['/flag/a', '/flag/c', '/flag/b']);
    const none = loadSettings(env, {}, '/');
    expect(none.explicitRoots).toEqual(['/env/root']);
    expect(none.sources.roots).toBe('env');
  });
});
