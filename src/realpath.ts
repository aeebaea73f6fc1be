import fs from 'node:fs';

/**
 * realpath(3) where it is the C library's (one call instead of Node's lstat per path component); Windows keeps Node's
 * JavaScript walk, which copes with the subst and RAM drives its native call refuses (`agents` and doctor run there).
 */
export const realpathOf: (p: string) => string = process.platform === 'win32' ? fs.realpathSync : fs.realpathSync.native;

/** The realpath, or null when the path does not resolve (missing, a dangling link, unreadable). */
export function realpathOrNull(p: string): string | null {
  try {
    return realpathOf(p);
  } catch {
    return null;
  }
}
