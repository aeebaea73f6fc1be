import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SubagentError } from '../errors.js';
import { realpathOrNull } from '../realpath.js';
import type { ManagerContext } from './context.js';

/** Whether `child` (a realpath) is `root` (a realpath) or inside it. */
export function isInside(child: string, root: string): boolean {
  const rel = path.relative(root, child);
  // `..` as a whole first segment only: a directory named `..data` inside the root is inside it.
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel));
}

/**
 * The roots when neither SUBAGENTS_ROOTS nor the client gives any: the server's working directory, unless that is
 * `/` or the home directory (a GUI client's default), where running agents would expose everything.
 */
export function fallbackRoots(cwd: string, env: NodeJS.ProcessEnv): string[] {
  const real = realpathOrNull(cwd);
  if (!real) return [];
  const home = realpathOrNull(env.HOME || os.homedir());
  if (real === path.parse(real).root || real === home) return [];
  return [real];
}

/** Resolves a launch's `cwd` (relative to the first root) and checks it against the roots by realpath. */
export function resolveRunCwd(ctx: ManagerContext, cwd: string | undefined): string {
  const roots = ctx.roots();
  const named = ctx.settings.explicitRoots;
  if (roots.length === 0 && named !== null) {
    throw new SubagentError('CWD_NOT_ALLOWED', `no root SUBAGENTS_ROOTS (or --root) names is an existing directory (${named.slice(0, 4).map((r) => JSON.stringify(r.slice(0, 200))).join(', ')}${named.length > 4 ? ' …' : ''}); fix the path or create the directory.`);
  }
  if (roots.length === 0) {
    throw new SubagentError('CWD_NOT_ALLOWED', 'no roots are configured: the server was started in / or the home directory and the client gave no MCP roots. Set SUBAGENTS_ROOTS to the project directories agents may work in.');
  }
  const wanted = cwd === undefined ? roots[0]! : path.resolve(roots[0]!, cwd);
  const real = realpathOrNull(wanted);
  if (!real || !fs.statSync(real).isDirectory()) {
    throw new SubagentError('CWD_NOT_ALLOWED', `cwd ${JSON.stringify(String(cwd).slice(0, 200))} does not exist or is not a directory; give a directory inside ${roots.join(', ')}.`);
  }
  // The realpath is checked, so a symlink inside a root that points outside it is refused.
  if (!roots.some((r) => isInside(real, r))) {
    throw new SubagentError('CWD_NOT_ALLOWED', `cwd ${JSON.stringify(String(cwd).slice(0, 200))} resolves outside the allowed roots (${roots.join(', ')}); use a directory inside one, or add it to SUBAGENTS_ROOTS.`);
  }
  return real;
}
