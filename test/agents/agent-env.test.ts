import { describe, expect, it } from 'vitest';
import { BASE_ENV, buildAgentEnv, globToRegExp, isNestingName, isNeverPass, NEVER_PASS } from '../../src/agents/agent-env.js';
import { DEFAULT_PASS_ENV } from '../../src/config.js';

const SENTINEL = 'sentinel-secret-9c1e5b';

/** A server environment full of things that must not leak, next to what may. */
function serverEnv(): NodeJS.ProcessEnv {
  return {
    HOME: '/home/u', LOGNAME: 'u', PATH: '/usr/bin:/bin', SHELL: '/bin/bash', TERM: 'xterm', USER: 'u', LANG: 'C.UTF-8', TMPDIR: '/tmp',
    LC_ALL: 'C', LC_CTYPE: 'UTF-8', TZ: 'UTC', XDG_CONFIG_HOME: '/home/u/.config',
    http_proxy: 'http://proxy:3128', HTTPS_PROXY: 'http://proxy:3128', no_proxy: 'localhost',
    ANTHROPIC_API_KEY: 'ak', OPENAI_API_KEY: 'ok', MY_AGENT_KEY: 'mk',
    AWS_SECRET_ACCESS_KEY: SENTINEL, GITHUB_TOKEN: SENTINEL, DATABASE_URL: SENTINEL, SECRET_SENTINEL: SENTINEL,
    NODE_OPTIONS: `--require /tmp/${SENTINEL}.js`, LD_PRELOAD: SENTINEL, LD_LIBRARY_PATH: SENTINEL, DYLD_INSERT_LIBRARIES: SENTINEL,
    BASH_ENV: SENTINEL, ENV: SENTINEL, PYTHONSTARTUP: SENTINEL, GIT_SSH_COMMAND: SENTINEL,
    SUBAGENTS_SESSION_ID: SENTINEL, SUBAGENTS_ROOTS: SENTINEL, SUBAGENTS_BUDGET: SENTINEL, SUBAGENTS_MAX_DEPTH: '99',
  };
}

describe('buildAgentEnv', () => {
  it('passes exactly the allowlist: base, pass-env globs, credentials, agent env, then extra', () => {
    const env = buildAgentEnv({
      source: serverEnv(),
      passEnv: DEFAULT_PASS_ENV,
      credentialEnv: ['ANTHROPIC_API_KEY', 'CLAUDE_CONFIG_DIR'],
      agentEnv: ['MY_AGENT_KEY'],
      extra: { SUBAGENTS_HOME: '/state', SUBAGENTS_DEPTH: '1', SUBAGENTS_BUDGET: 'b'.repeat(43) },
    });
    expect(env).toEqual({
      HOME: '/home/u', LOGNAME: 'u', PATH: '/usr/bin:/bin', SHELL: '/bin/bash', TERM: 'xterm', USER: 'u', LANG: 'C.UTF-8', TMPDIR: '/tmp',
      LC_ALL: 'C', LC_CTYPE: 'UTF-8', TZ: 'UTC', XDG_CONFIG_HOME: '/home/u/.config',
      http_proxy: 'http://proxy:3128', HTTPS_PROXY: 'http://proxy:3128', no_proxy: 'localhost',
      ANTHROPIC_API_KEY: 'ak', MY_AGENT_KEY: 'mk',
      SUBAGENTS_HOME: '/state', SUBAGENTS_DEPTH: '1', SUBAGENTS_BUDGET: 'b'.repeat(43),
    });
    expect(JSON.stringify(env)).not.toContain(SENTINEL);
    expect(env).not.toHaveProperty('OPENAI_API_KEY'); // another backend's credential
  });

  it('with nothing named, passes only the base variables', () => {
    const env = buildAgentEnv({ source: serverEnv(), passEnv: [], credentialEnv: [], agentEnv: [], extra: {} });
    expect(Object.keys(env).sort()).toEqual([...BASE_ENV].sort());
  });

  it('never passes the dangerous names, even when named by pass-env, credentials or the agent', () => {
    const names = ['NODE_OPTIONS', 'LD_PRELOAD', 'LD_LIBRARY_PATH', 'DYLD_INSERT_LIBRARIES', 'BASH_ENV', 'ENV', 'PYTHONSTARTUP', 'GIT_SSH_COMMAND'];
    const env = buildAgentEnv({ source: serverEnv(), passEnv: [...names, 'DYLD_*', '*'], credentialEnv: names, agentEnv: names, extra: {} });
    for (const n of names) expect(env).not.toHaveProperty(n);
  });

  it('a pass-env of * still keeps the never-pass and SUBAGENTS_* names out', () => {
    const env = buildAgentEnv({ source: serverEnv(), passEnv: ['*'], credentialEnv: [], agentEnv: [], extra: {} });
    expect(env.SECRET_SENTINEL).toBe(SENTINEL); // the operator asked for everything
    expect(Object.keys(env).filter((k) => isNeverPass(k) || k.startsWith('SUBAGENTS_'))).toEqual([]);
  });

  it('never copies SUBAGENTS_* variables from the source; only extra sets them', () => {
    const env = buildAgentEnv({ source: serverEnv(), passEnv: ['SUBAGENTS_*'], credentialEnv: ['SUBAGENTS_SESSION_ID'], agentEnv: ['SUBAGENTS_ROOTS'], extra: { SUBAGENTS_PARENT_RUN_ID: 'r1' } });
    expect(Object.keys(env).filter((k) => k.startsWith('SUBAGENTS_'))).toEqual(['SUBAGENTS_PARENT_RUN_ID']);
  });

  it('extra is set last and wins, except for never-pass names', () => {
    const env = buildAgentEnv({ source: serverEnv(), passEnv: [], credentialEnv: [], agentEnv: [], extra: { HOME: '/other', NODE_OPTIONS: '--inspect' } });
    expect(env.HOME).toBe('/other');
    expect(env).not.toHaveProperty('NODE_OPTIONS');
  });

  it('matches pass-env names and globs case-insensitively', () => {
    const env = buildAgentEnv({ source: { http_proxy: 'p', lc_all: 'C', Https_Proxy: 'q', FOO_BAR: 'f', FOOBAR: 'g' }, passEnv: ['HTTP_PROXY', 'LC_*', 'https_proxy', 'foo_*'], credentialEnv: [], agentEnv: [], extra: {} });
    expect(env).toEqual({ http_proxy: 'p', lc_all: 'C', Https_Proxy: 'q', FOO_BAR: 'f' });
  });

  it('skips names that are not set and values that cannot be in an environment', () => {
    const env = buildAgentEnv({ source: { HOME: '/h', PATH: undefined, BAD: 'a\u0000b' }, passEnv: [], credentialEnv: ['MISSING'], agentEnv: ['BAD'], extra: {} });
    expect(env).toEqual({ HOME: '/h' });
  });

  it('treats glob metacharacters other than * literally', () => {
    expect(globToRegExp('A.B').test('AXB')).toBe(false);
    expect(globToRegExp('A.B').test('a.b')).toBe(true);
    expect(globToRegExp('X_*_Y').test('X_1_2_Y')).toBe(true);
  });
});

describe('NEVER_PASS / isNeverPass / isNestingName', () => {
  it('lists the SPEC names', () => {
    expect([...NEVER_PASS]).toEqual(['NODE_OPTIONS', 'LD_PRELOAD', 'LD_LIBRARY_PATH', 'DYLD_*', 'BASH_ENV', 'ENV', 'PYTHONSTARTUP', 'GIT_SSH_COMMAND']);
  });

  it.each([
    ['NODE_OPTIONS', true], ['node_options', true], ['DYLD_INSERT_LIBRARIES', true], ['DYLD_', true], ['ENV', true],
    ['ENVIRONMENT', false], ['MY_ENV', false], ['LD_PRELOAD_X', false], ['NODE_EXTRA_CA_CERTS', false], ['PATH', false],
  ])('isNeverPass(%s) = %s', (name, expected) => {
    expect(isNeverPass(name)).toBe(expected);
  });

  it('recognises the SUBAGENTS_ prefix', () => {
    expect(isNestingName('SUBAGENTS_BUDGET')).toBe(true);
    expect(isNestingName('MY_SUBAGENTS_X')).toBe(false);
  });
});
