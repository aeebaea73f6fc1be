import fs from 'node:fs';
import module from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { userCacheDir } from './compile-cache.js';

/**
 * Loads what `serve` runs. On Node 20, which has no module compile cache (src/compile-cache.ts), the bundled bin
 * compiles the server's CommonJS bundle (dist/server.cjs) with a V8 code cache kept in the user's own cache directory,
 * so that later starts skip compiling the functions a start runs (docs/performance.md, "Cold start and idle RSS").
 * V8 refuses a cache made by another V8, other flags or a source of another length; the file's name carries the
 * bundle's size, mtime and inode besides, so a cache of another build is never even read. Compiled code is loaded as it
 * is: the directory must be one nobody else can write to, and neither it nor the file is followed through a symlink.
 * A missing, unreadable, refused or foreign cache costs the speed-up, never the start. Elsewhere (Node ≥ 22.1, the tsc
 * build, NODE_DISABLE_COMPILE_CACHE=1) the server is imported as an ES module.
 */

type ServerEntry = typeof import('./server-entry.js');

/** The CommonJS bundle beside dist/main.js; scripts/bundle.mjs defines it for the bundled bin only. */
declare const __SUBAGENTS_SERVER_CJS__: string | undefined;

/** Caches of other builds untouched this long are removed when a fresh one is written (builds come and go). */
const STALE_CACHE_MS = 60 * 60 * 1000;
/** A cache larger than this is not ours (the server's is ~0.6 MiB). */
const MAX_CACHE_BYTES = 64 * 1024 * 1024;
/** The cache is written once the client has been quiet for one tick, or after the last tick regardless. */
const IDLE_TICK_MS = 100;
const IDLE_TICKS_MAX = 100;

export interface LoadedServer {
  entry: ServerEntry;
  /** Writes a fresh cache once stdin has been quiet (after the start-up exchange); a no-op when none is due. */
  saveCacheWhenIdle: () => void;
}

export async function loadServer(env: NodeJS.ProcessEnv = process.env): Promise<LoadedServer> {
  const cjs = typeof __SUBAGENTS_SERVER_CJS__ === 'string' ? __SUBAGENTS_SERVER_CJS__ : null;
  const hasCompileCache = typeof (module as { enableCompileCache?: unknown }).enableCompileCache === 'function';
  if (cjs !== null && !hasCompileCache && !env.NODE_DISABLE_COMPILE_CACHE) {
    try {
      return loadCompiled(fileURLToPath(new URL(cjs, import.meta.url)), env);
    } catch {
      // An unreadable bundle: the ES module serves.
    }
  }
  return { entry: await import('./server-entry.js'), saveCacheWhenIdle: () => {} };
}

function loadCompiled(bundle: string, env: NodeJS.ProcessEnv): LoadedServer {
  const vm = process.getBuiltinModule('node:vm');
  // One descriptor for the source and its identity: the cache's name describes the bytes compiled.
  const fd = fs.openSync(bundle, 'r');
  let source: string;
  let st: fs.Stats;
  try {
    st = fs.fstatSync(fd);
    source = fs.readFileSync(fd).toString('utf8');
  } finally {
    fs.closeSync(fd);
  }
  const dir = cacheDir(env);
  const name = `server-${process.versions.v8.replace(/[^\w.-]/g, '_')}-${st.size}-${Math.trunc(st.mtimeMs)}-${st.ino}.v8cache`;
  const cachedData = readPrivateFile(dir, name);
  const script = new vm.Script(
    `(function (exports, require, module, __filename, __dirname, __serverFileUrl, __load) {${source}\n})`,
    { filename: bundle, cachedData },
  );
  const url = pathToFileURL(bundle).href;
  const req = (id: string): unknown => {
    const m = process.getBuiltinModule(id);
    if (m === undefined) throw new Error(`the server bundle requires ${id}, which is not a Node built-in`);
    return m;
  };
  const load = (spec: string): Promise<unknown> => import(new URL(spec, url).href);
  const mod = { exports: {} as ServerEntry };
  (script.runInThisContext() as (...a: unknown[]) => void).call(mod.exports, mod.exports, req, mod, bundle, path.dirname(bundle), url, load);
  const fresh = cachedData === undefined || script.cachedDataRejected === true;
  return {
    entry: mod.exports,
    saveCacheWhenIdle: () => {
      if (fresh) whenIdle(() => writePrivateFile(dir, name, () => script.createCachedData()));
    },
  };
}

/** `<XDG_CACHE_HOME or ~/.cache>/subagents-mcp/v8-code-cache`, beside Node's compile cache (src/compile-cache.ts). */
function cacheDir(env: NodeJS.ProcessEnv): string {
  return path.join(userCacheDir(env), 'v8-code-cache');
}

const uid = process.getuid?.();

/** Ours and writable by no one else; a real file or directory, not a symlink to one. */
function isPrivate(st: fs.Stats, otherBits: number): boolean {
  return (uid === undefined || st.uid === uid) && (st.mode & otherBits) === 0;
}

/** The directory and its parent are real directories of ours that no one else can write to. */
function dirIsPrivate(dir: string): boolean {
  const leaf = fs.lstatSync(dir);
  const parent = fs.lstatSync(path.dirname(dir));
  return leaf.isDirectory() && isPrivate(leaf, 0o077) && parent.isDirectory() && isPrivate(parent, 0o022);
}

function readPrivateFile(dir: string, name: string): Buffer | undefined {
  try {
    if (!dirIsPrivate(dir)) return undefined;
    const fd = fs.openSync(path.join(dir, name), fs.constants.O_RDONLY | (fs.constants.O_NOFOLLOW ?? 0));
    try {
      const st = fs.fstatSync(fd);
      if (!st.isFile() || !isPrivate(st, 0o077) || st.size === 0 || st.size > MAX_CACHE_BYTES) return undefined;
      return fs.readFileSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return undefined; // none yet, or not ours
  }
}

function writePrivateFile(dir: string, name: string, data: () => Buffer): void {
  const tmp = path.join(dir, `${name}.${process.pid}.tmp`);
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    if (!dirIsPrivate(dir)) return;
    const fd = fs.openSync(tmp, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | (fs.constants.O_NOFOLLOW ?? 0), 0o600);
    try {
      fs.writeFileSync(fd, data());
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, path.join(dir, name));
    removeStaleCaches(dir, name);
  } catch {
    // No cache this time: the next start compiles as this one did.
    fs.rmSync(tmp, { force: true });
  }
}

function removeStaleCaches(dir: string, keep: string): void {
  const now = Date.now();
  for (const n of fs.readdirSync(dir)) {
    if (n === keep || !n.startsWith('server-')) continue;
    try {
      const f = path.join(dir, n);
      if (now - fs.lstatSync(f).mtimeMs > STALE_CACHE_MS) fs.rmSync(f, { force: true });
    } catch { /* gone meanwhile */ }
  }
}

/**
 * Runs `fn` once stdin has been quiet for a tick after some input (the start-up exchange answered), or after the last
 * tick: never on the path to the first answers. The timer keeps no process alive.
 */
function whenIdle(fn: () => void): void {
  const stdin = process.stdin as { bytesRead?: number };
  let last = stdin.bytesRead ?? 0;
  let ticks = 0;
  const timer = setInterval(() => {
    const read = stdin.bytesRead ?? 0;
    ticks++;
    if ((read > 0 && read === last) || ticks >= IDLE_TICKS_MAX) {
      clearInterval(timer);
      fn();
    }
    last = read;
  }, IDLE_TICK_MS);
  timer.unref();
}
