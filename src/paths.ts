import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Where the package's files are, computed from this module's own location. It sits at the root of `src/`, so it is
 * `dist/paths.js` in the tsc build and inside `dist/main.js` (or a `dist/chunk-*.js`) in the bundled build: either
 * way its directory is `dist/`. Every path to a built entry or a shipped file is derived here, nowhere else.
 */
export const DIST_DIR = path.dirname(fileURLToPath(import.meta.url));
/** The bin (`subagents-mcp`): the server and the command line. */
export const MAIN_JS = path.join(DIST_DIR, 'main.js');
/**
 * The detached runner's entry (never bundled into the server: it must load only built-ins before ready): the bundled
 * build's CommonJS file when there is one (scripts/bundle.mjs says why), else tsc's module graph.
 */
export const RUNNER_MAIN = ((bundled) => (fs.existsSync(bundled) ? bundled : path.join(DIST_DIR, 'runner', 'main.js')))(
  path.join(DIST_DIR, 'runner', 'main.cjs'),
);
/** The thread that spawns runners off the server's event loop (tsc's output, built-ins only). */
export const SPAWNER_WORKER = path.join(DIST_DIR, 'process', 'spawner-worker.js');
/** The agents shipped with the package (used by `demo`). */
export const BUNDLED_AGENTS_DIR = path.join(DIST_DIR, '..', 'agents');
