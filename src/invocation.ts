import fs from 'node:fs';
import path from 'node:path';
import { MAIN_JS } from './paths.js';

/**
 * How a person at a shell runs this installation's command line. `subagents-mcp` only when that name on PATH is this
 * very file (a global install or `npm link` of this package); otherwise (a checkout, a project-local install, an
 * unpacked Claude Desktop bundle) the exact `node /abs/…/dist/main.js` that works, so a printed hint never sends
 * someone to a missing command or to another installation with another state home default or version.
 */
export function peopleCommand(args: string): string {
  cached ??= invocationPrefix(process.env.PATH ?? '');
  return args === '' ? cached : `${cached} ${args}`;
}

let cached: string | undefined;

/** The command prefix for a PATH; the parts that vary are parameters so that tests can name them. */
export function invocationPrefix(pathEnv: string, mainJs: string = MAIN_JS, execPath: string = process.execPath): string {
  const self = realpathOrUndefined(mainJs);
  if (self !== undefined && findOnPath('subagents-mcp', pathEnv) === self) return 'subagents-mcp';
  const node = findOnPath('node', pathEnv) === realpathOrUndefined(execPath) ? 'node' : shellQuote(execPath);
  return `${node} ${shellQuote(self ?? mainJs)}`;
}

/** The realpath of the first executable file called `name` in PATH's absolute entries, if any. */
function findOnPath(name: string, pathEnv: string): string | undefined {
  for (const dir of pathEnv.split(path.delimiter)) {
    if (!path.isAbsolute(dir)) continue;
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.statSync(candidate).isFile()) return fs.realpathSync(candidate);
    } catch {
      // Not here; the next entry.
    }
  }
  return undefined;
}

function realpathOrUndefined(p: string): string | undefined {
  try {
    return fs.realpathSync(p);
  } catch {
    return undefined;
  }
}

/** A POSIX shell word: as it is when plainly safe, else single-quoted. */
function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}
