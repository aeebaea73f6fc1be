import fs from 'node:fs';
import path from 'node:path';
import { SubagentError } from '../errors.js';

/**
 * State homes this process works in. O_NOFOLLOW guards only the last component of a path: a run directory replaced
 * by a symlink (`runs/<id>` → elsewhere) would have every write "into the run" land in the link's target, and every
 * read come from there. Every open under a registered home checks the components between the home and the file.
 */
const homes = new Set<string>();

/** Registers a state home (Layout does, for every process that works in one). */
export function guardStateHome(home: string): void {
  homes.add(path.resolve(home));
}

/**
 * Refuses `file` when a component of its directory below a registered home is a symlink (or not a directory):
 * STATE_CORRUPT naming the component, never followed. A path outside every registered home is not checked. One
 * lstat per component (a run's files are two or three below the home).
 */
export function assertNoLinkBelowHome(file: string): void {
  if (homes.size === 0) return;
  const dir = path.dirname(path.resolve(file));
  for (const home of homes) {
    if (dir !== home && !dir.startsWith(home + path.sep)) continue;
    let at = home;
    for (const part of dir.slice(home.length).split(path.sep)) {
      if (part === '') continue;
      at = path.join(at, part);
      let st: fs.Stats;
      try {
        st = fs.lstatSync(at);
      } catch {
        return; // missing: the open itself fails with its own errno
      }
      if (st.isSymbolicLink()) {
        throw new SubagentError('STATE_CORRUPT', `${path.relative(home, at)} in the state home is a symlink; state files are never written or read through one. Remove it (the run it belongs to cannot be trusted).`);
      }
      if (!st.isDirectory()) return; // the open fails ENOTDIR
    }
    return;
  }
}
