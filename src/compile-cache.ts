import module from 'node:module';
import os from 'node:os';
import path from 'node:path';

/**
 * On Node ≥ 22.1, keeps V8's compiled code of this package's modules on disk, so that later starts (every server a
 * client launches, every command) skip parsing and compiling them: figures in docs/performance.md. A no-op on Node 20,
 * when NODE_DISABLE_COMPILE_CACHE=1, and when NODE_COMPILE_CACHE already enabled it for the whole process.
 * The cache lives in the user's own cache directory, not Node's default under the shared temp directory: compiled code
 * is loaded as it is, so its directory must be one nobody else can write to.
 */
export function enableCompileCache(env: NodeJS.ProcessEnv = process.env): void {
  const enable = (module as { enableCompileCache?: (dir?: string) => unknown }).enableCompileCache;
  if (typeof enable !== 'function' || env.NODE_COMPILE_CACHE) return;
  try {
    enable(path.join(userCacheDir(env), 'node-compile-cache'));
  } catch {
    // An unwritable cache directory costs the speed-up, never the start.
  }
}

/** This package's folder in the user's own cache directory: `<XDG_CACHE_HOME or ~/.cache>/subagents-mcp`. */
export function userCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CACHE_HOME && path.isAbsolute(env.XDG_CACHE_HOME) ? env.XDG_CACHE_HOME : path.join(os.homedir(), '.cache');
  return path.join(base, 'subagents-mcp');
}
