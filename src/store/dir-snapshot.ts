import fs from 'node:fs';

/**
 * What changes when a directory gains or loses a name: its mtime (a coarse kernel tick), its link count (with each
 * subdirectory) or its size (with each new block). Equal signatures mean "most likely unchanged", which is all a
 * cache of a large directory's names may rely on. Null when the directory cannot be read.
 */
export function dirSignature(dir: string): string | null {
  try {
    const st = fs.statSync(dir);
    return `${st.ino}:${st.nlink}:${st.size}:${st.mtimeMs}`;
  } catch {
    return null;
  }
}

/** How old a directory's last change must be before its signature is trusted to show the next one. */
export const SETTLED_DIR_AGE_MS = 1000;

/**
 * `dirSignature` for a directory that is then taken as unchanged while its signature stays the same. Null while its
 * last change is under SETTLED_DIR_AGE_MS old: the mtime is a coarse kernel tick, so a second change within the same
 * tick as the first would leave the signature as it was and go unseen.
 */
export function settledDirSignature(dir: string, nowMs = Date.now()): string | null {
  try {
    const st = fs.statSync(dir);
    if (Math.abs(nowMs - st.mtimeMs) < SETTLED_DIR_AGE_MS) return null;
    return `${st.ino}:${st.nlink}:${st.size}:${st.mtimeMs}`;
  } catch {
    return null;
  }
}

export interface DirSnapshot {
  /** Taken just before the names were read: a change after it shows as a different signature later. */
  sig: string;
  names: string[];
}

/** The names in `dir` with its signature, so that one read can serve several readers (`runs/` can hold 10 000 runs). */
export function readDirSnapshot(dir: string): DirSnapshot | null {
  const sig = dirSignature(dir);
  if (sig === null) return null;
  try {
    return { sig, names: fs.readdirSync(dir) };
  } catch {
    return null;
  }
}
