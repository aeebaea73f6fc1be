import fs from 'node:fs';
import { loadSettings, type Settings } from '../config.js';
import { isRunId } from '../ids.js';
import { makeStore, type ManagerContext } from '../manager/context.js';
import { checkHome, identifyLockHolder } from '../manager/state-home.js';
import { peopleCommand } from '../invocation.js';

/** Exit codes scripts can rely on. */
export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/** A failure to report to a person on stderr, with the exit code to end with. */
export class CliError extends Error {
  constructor(message: string, readonly exitCode = EXIT_FAILURE) {
    super(message);
  }
}

/**
 * The sessions an operator sees: every one. The CLI is the person who owns the state home, not a conversation, so
 * isolation between sessions (which protects conversations from each other) does not apply to it.
 */
class EverySession extends Set<string> {
  override has(_id: string): boolean {
    return true;
  }
}

/** The session id the CLI records as the author of a cancel or dismiss it asks for. */
export const OPERATOR_SESSION = 'operator-cli';

export function cliSettings(flags: Record<string, string | string[] | undefined>, env = process.env): Settings {
  try {
    return loadSettings(env, flags);
  } catch (e) {
    throw new CliError((e as Error).message, EXIT_USAGE);
  }
}

/**
 * The manager context of the command line: sees every session's runs, is never nested, owns no roots. Refuses a
 * state home that is unsafe (the server would refuse it too); `doctor` explains why.
 */
export function operatorContext(settings: Settings, env = process.env, o: { requireSafeHome?: boolean } = {}): ManagerContext {
  identifyLockHolder(settings);
  const check = checkHome(settings.home);
  if (check.problems.length && o.requireSafeHome !== false) {
    throw new CliError(`unsafe state home: ${check.problems.join('; ')}. Run ${peopleCommand('doctor')} for details.`);
  }
  const { layout, store, ledger, sessionRegistry, server } = makeStore(settings);
  const all = new EverySession();
  return {
    settings, layout, store, ledger, sessionRegistry, sessionId: OPERATOR_SESSION, server, nesting: null, env,
    log: (line) => process.stderr.write(`subagents-mcp: ${line}\n`),
    roots: () => [],
    visibleSessions: () => all,
  };
}

/**
 * A run id from the command line: the full id, or a unique prefix of one (`r-Ab3`, or without the `r-`), like
 * `docker` accepts. Not found and ambiguous are failures naming the state home.
 */
export function resolveRunId(ctx: ManagerContext, arg: string): string {
  const want = arg.trim();
  if (isRunId(want) && fs.existsSync(ctx.store.paths(want).record)) return want;
  const prefix = want.startsWith('r-') ? want : `r-${want}`;
  // `r-` alone is a prefix too (of every run): it resolves when there is one run, and is ambiguous otherwise.
  if ((want.length >= 3 || want === 'r-') && /^[A-Za-z0-9_-]+$/.test(want)) {
    const matches = ctx.store.listRunIds().filter((id) => id.startsWith(prefix) && fs.existsSync(ctx.store.paths(id).record));
    if (matches.length === 1) return matches[0]!;
    if (matches.length > 1) {
      throw new CliError(`${JSON.stringify(want)} matches ${matches.length} runs (${matches.slice(0, 5).join(', ')}${matches.length > 5 ? ', …' : ''}); give more of the id.`);
    }
  }
  const shown = JSON.stringify(want.slice(0, 40));
  throw new CliError(`no run ${shown} in ${ctx.settings.home}; list runs with: ${peopleCommand('runs --all')}`);
}
