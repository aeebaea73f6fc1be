import fs from 'node:fs';
import path from 'node:path';

export interface ResolveBinOptions {
  /** SUBAGENTS_BIN_<BACKEND>: when given it is the only candidate. */
  override?: string;
  /** The PATH to search; the process's own when absent. */
  pathEnv?: string;
}

/**
 * The absolute path of the executable regular file a backend runs, or null. No shell and no `which`: what runs is
 * exactly the file checked here.
 *
 * - `override` must be an absolute path; a bad one gives null rather than falling back to PATH, so a typo in the
 *   operator's setting never silently runs some other program of the same name;
 * - a name containing a separator must be absolute (a relative one would depend on the run's cwd, the repository);
 * - a bare name is looked up in the absolute entries of PATH, in order; empty or relative entries (`.`, `bin`) are
 *   skipped, as they would resolve inside the untrusted working directory.
 */
export function resolveBin(name: string, o: ResolveBinOptions = {}): string | null {
  if (o.override !== undefined && o.override !== '') {
    return path.isAbsolute(o.override) ? executableAt(path.normalize(o.override)) : null;
  }
  if (name === '' || name.includes('\u0000')) return null;
  if (name.includes('/') || name.includes(path.sep)) {
    return path.isAbsolute(name) ? executableAt(path.normalize(name)) : null;
  }
  const pathEnv = o.pathEnv ?? process.env.PATH ?? '';
  for (const dir of pathEnv.split(path.delimiter)) {
    if (dir === '' || !path.isAbsolute(dir)) continue;
    for (const candidate of candidatesIn(dir, name)) {
      const found = executableAt(candidate);
      if (found) return found;
    }
  }
  return null;
}

/** On Windows a bare name is found through PATHEXT (`claude` → `claude.cmd`); elsewhere only the name itself. */
function candidatesIn(dir: string, name: string): string[] {
  const plain = path.join(dir, name);
  if (process.platform !== 'win32' || path.extname(name) !== '') return [plain];
  const exts = (process.env.PATHEXT ?? '.COM;.EXE;.BAT;.CMD').split(';').filter(Boolean);
  return [plain, ...exts.map((e) => plain + e.toLowerCase())];
}

/** `file` when it is (or links to) a regular file this user may execute. */
function executableAt(file: string): string | null {
  try {
    // stat follows symlinks on purpose: CLIs are commonly installed as links (npm, Homebrew); a directory or device
    // named like the CLI is not executable in the sense meant here.
    // throwIfNoEntry: most candidates are PATH entries without the name, and an ENOENT error built per miss (its
    // message, its stack) was most of resolving a command.
    if (!fs.statSync(file, { throwIfNoEntry: false })?.isFile()) return null;
    fs.accessSync(file, fs.constants.X_OK);
    return file;
  } catch {
    return null;
  }
}
