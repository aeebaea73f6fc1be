import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadSettings } from '../src/config.js';
import { parseServeFlags, SETTING_ENV_NAMES } from '../src/serve-flags.js';

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

  it('every numeric setting has its flag, which wins over its variable; a lower bound alone says "at least"', () => {
    const flags = parseServeFlags(['--lock-wait-ms', '100', '--warm-runners', '0', '--warm-idle-ms', '2000', '--warm-runner-runs', '3']);
    const s = loadSettings({ SUBAGENTS_WARM_RUNNERS: '4', SUBAGENTS_LOCK_WAIT_MS: '900' }, flags);
    expect([s.lockWaitMs, s.warmRunners, s.warmIdleMs, s.warmRunnerRuns]).toEqual([100, 0, 2000, 3]);
    expect(s.sources.warmRunners).toBe('flag');
    for (const env of ['SUBAGENTS_LOCK_WAIT_MS', 'SUBAGENTS_WARM_RUNNERS', 'SUBAGENTS_WARM_IDLE_MS', 'SUBAGENTS_WARM_RUNNER_RUNS', 'SUBAGENTS_MAX_QUEUED']) {
      expect(SETTING_ENV_NAMES, env).toContain(env);
    }
    expect(() => loadSettings({ SUBAGENTS_MAX_AGENTS: '0' })).toThrow('SUBAGENTS_MAX_AGENTS must be at least 1, got 0');
  });
});
