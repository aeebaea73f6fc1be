import fs from 'node:fs';
import path from 'node:path';
import { writeFileAtomic } from '../store/atomic-write.js';

/**
 * The supervisor bundle compiled with a V8 code cache kept in the state home's warm directory (docs/architecture.md,
 * "Warm runners"). Node 20 has no compile cache of its own (`module.enableCompileCache` is Node ≥ 22.1), and V8
 * compiles most functions at their first call: a cache made after an idle runner's rehearsal holds the bundle's
 * top-level code and every function the rehearsal ran, so later runners — idle ones booting, and runners booted for a
 * run when the pool is empty, on the launch's path — skip those compiles (measured: the supervisor's load 65 → 38 ms
 * of CPU, a first run 83 → 65 ms). V8 checks that a cache matches the source and its own version and flags, and
 * refuses one that does not (then the bundle compiles as without it, and a fresh cache replaces it). The cache is a
 * file of the user's private state home, like everything the runner trusts there. Node built-ins only: the runner's
 * entry uses this.
 */

/** Caches of other builds untouched this long are removed when a fresh one is written (builds come and go). */
const STALE_CACHE_MS = 60 * 60 * 1000;

/** The cache file of this bundle (its size and mtime) and this V8, in `warmDir`; null if the bundle cannot be read. */
export function supervisorCacheFile(warmDir: string, bundle: string): string | null {
  try {
    const st = fs.statSync(bundle);
    const v8 = process.versions.v8.replace(/[^\w.-]/g, '_');
    return path.join(warmDir, `supervisor-${v8}-${st.size}-${Math.trunc(st.mtimeMs)}.v8cache`);
  } catch {
    return null;
  }
}

export interface LoadedBundle<T> {
  exports: T;
  /** Writes the cache (call after the code worth caching has run); only when no accepted cache was used. */
  saveCache: () => void;
}

/**
 * Runs a CommonJS bundle whose own requires are all Node built-ins, as `require` would, compiled with the cache in
 * `cacheFile` when it is there and accepted. `req` is the caller's require (it resolves the bundle's built-ins).
 */
export function loadCachedBundle<T>(bundle: string, cacheFile: string | null, req: NodeJS.Require): LoadedBundle<T> {
  const vm = req('node:vm') as typeof import('node:vm');
  // Read whole, then decoded: read as text, Node grows the file's bytes in malloc'd memory (8 KiB reads, two regrowths
  // past 256 KiB) and frees it, which makes glibc raise its mmap and trim thresholds; the compile's ~4 MiB of V8
  // zone memory then stayed in the process's heap after it was freed (~2 MiB more RSS, docs/performance.md,
  // "Runner boot and RSS").
  const source = fs.readFileSync(bundle).toString('utf8');
  let cachedData: Buffer | undefined;
  if (cacheFile) {
    try { cachedData = fs.readFileSync(cacheFile); } catch { /* none yet */ }
  }
  const script = new vm.Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, { filename: bundle, cachedData });
  const mod = { exports: {} as T };
  (script.runInThisContext() as (...a: unknown[]) => void).call(mod.exports, mod.exports, req, mod, bundle, path.dirname(bundle));
  const fresh = cachedData === undefined || script.cachedDataRejected === true;
  return {
    exports: mod.exports,
    saveCache: () => {
      if (!fresh || !cacheFile) return;
      try {
        writeFileAtomic(cacheFile, script.createCachedData(), { durable: false });
        removeStaleCaches(path.dirname(cacheFile), path.basename(cacheFile));
      } catch { /* no cache this time: the next runner compiles as before */ }
    },
  };
}

function removeStaleCaches(dir: string, keep: string): void {
  const now = Date.now();
  for (const n of fs.readdirSync(dir)) {
    if (n === keep || !n.startsWith('supervisor-') || !n.endsWith('.v8cache')) continue;
    try {
      const f = path.join(dir, n);
      if (now - fs.statSync(f).mtimeMs > STALE_CACHE_MS) fs.rmSync(f, { force: true });
    } catch { /* gone meanwhile */ }
  }
}
