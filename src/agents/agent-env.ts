/**
 * The environment an agent process starts with (docs/agents.md): an allowlist, never the server's whole environment, so
 * secrets the server happens to hold do not reach a CLI that did not ask for them.
 */

/** Always passed when set: what a CLI needs to find its config, binaries, terminal and locale. */
export const BASE_ENV = ['HOME', 'LOGNAME', 'PATH', 'SHELL', 'TERM', 'USER', 'LANG', 'TMPDIR'] as const;

/**
 * Never passed, even if named by the operator, a backend or an agent file: each makes a program load or run code
 * chosen by whoever set it (preloaded libraries, Node/Python/shell start-up scripts, the ssh command git runs).
 * `*` is a wildcard.
 */
export const NEVER_PASS = ['NODE_OPTIONS', 'LD_PRELOAD', 'LD_LIBRARY_PATH', 'DYLD_*', 'BASH_ENV', 'ENV', 'PYTHONSTARTUP', 'GIT_SSH_COMMAND'] as const;

const NEVER_PASS_RE = NEVER_PASS.map((p) => globToRegExp(p));

/** Case-insensitive: on Windows `node_options` is the same variable, and refusing a lowercase twin costs nothing. */
export function isNeverPass(name: string): boolean {
  return NEVER_PASS_RE.some((re) => re.test(name));
}

/**
 * The server's own settings and the nesting variables (docs/contract.md, "Nesting and isolation"): only the runner sets them, through `extra`; taken
 * from the server's environment they would hand an agent the session's limits, roots or a forged budget.
 */
export function isNestingName(name: string): boolean {
  return /^SUBAGENTS_/i.test(name);
}

export interface AgentEnvInput {
  /** The environment to copy from (the runner's). */
  source: NodeJS.ProcessEnv;
  /** Names or `*` globs, matched case-insensitively (SUBAGENTS_PASS_ENV). */
  passEnv: string[];
  /** The backend's documented credential variables. */
  credentialEnv: string[];
  /** The agent file's `env`. */
  agentEnv: string[];
  /** Set last, as given: the nesting variables. */
  extra: Record<string, string>;
}

export function buildAgentEnv(o: AgentEnvInput): Record<string, string> {
  const env: Record<string, string> = {};
  const copy = (name: string): void => {
    if (isNeverPass(name) || isNestingName(name)) return;
    const value = o.source[name];
    // A NUL cannot be in an environment entry; spawn would throw on it.
    if (typeof value === 'string' && !value.includes('\u0000')) env[name] = value;
  };
  for (const name of BASE_ENV) copy(name);
  const patterns = o.passEnv.filter((p) => p.length > 0).map((p) => globToRegExp(p));
  for (const name of Object.keys(o.source)) {
    if (patterns.some((re) => re.test(name))) copy(name);
  }
  for (const name of o.credentialEnv) copy(name);
  for (const name of o.agentEnv) copy(name);
  for (const [name, value] of Object.entries(o.extra)) {
    // The never-pass rule holds for every source, the runner's own additions included.
    if (!isNeverPass(name)) env[name] = value;
  }
  return env;
}

/** `LC_*` → /^LC_.*$/i; every other character literal. */
export function globToRegExp(glob: string): RegExp {
  const body = glob.split('*').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*');
  return new RegExp(`^${body}$`, 'i');
}

/** NODE_EXTRA_CA_CERTS as the runner carries it (see launch's runnerEnv): its agents get it back under its own name. */
export const DEFERRED_CA_CERTS = 'SUBAGENTS_DEFERRED_NODE_EXTRA_CA_CERTS';

/** The runner's environment as its agents' source: the deferred CA bundle under its real name again. */
export function agentSourceEnv(runnerEnv: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const deferred = runnerEnv[DEFERRED_CA_CERTS];
  return deferred === undefined ? runnerEnv : { ...runnerEnv, NODE_EXTRA_CA_CERTS: deferred };
}
