/**
 * Installs the five real agent CLIs from the npm registry into a cache folder — never as project dependencies —
 * for the real-CLI tests. Each package gets its own prefix, so one failure leaves the others usable, and an install
 * whose package.json already has the pinned version is reused (a warm cache costs a few stat calls).
 *
 * Cache: $SUBAGENTS_CLI_CACHE, else <repo>/node_modules/.cache/subagents-cli. Cold, all five install in parallel
 * (≈ 1.3 GB on disk); each npm run is killed after INSTALL_TIMEOUT_MS.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import lockfile from 'proper-lockfile';

export type CliName = 'claude' | 'codex' | 'gemini' | 'pi' | 'opencode';

/** Versions a plain install picks on Node 20 (claude-code ≥ 2.1.198 needs Node 22). Pinned: the tests assert on their flags. */
export const CLI_PACKAGES: Record<CliName, { pkg: string; version: string; bin: string }> = {
  claude: { pkg: '@anthropic-ai/claude-code', version: '2.1.197', bin: 'claude' },
  codex: { pkg: '@openai/codex', version: '0.171.0', bin: 'codex' },
  gemini: { pkg: '@google/gemini-cli', version: '0.61.0', bin: 'gemini' },
  pi: { pkg: '@mariozechner/pi-coding-agent', version: '0.73.1', bin: 'pi' },
  opencode: { pkg: 'opencode-ai', version: '1.18.33', bin: 'opencode' },
};

export const INSTALL_TIMEOUT_MS = 6 * 60_000;

export interface InstalledCli {
  name: CliName;
  /** Absolute path of the executable, when installed. */
  bin?: string;
  version: string;
  /** Why it is not usable (install failed or timed out), for the skip message. */
  problem?: string;
  /** Whether this call installed it (false: reused from the cache). */
  installed: boolean;
  ms: number;
}

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export function cliCacheDir(): string {
  return path.resolve(process.env.SUBAGENTS_CLI_CACHE ?? path.join(REPO, 'node_modules/.cache/subagents-cli'));
}

/** Installs (or reuses) every CLI; never throws — a CLI that cannot be had comes back with `problem`. */
export async function installClis(names: CliName[] = Object.keys(CLI_PACKAGES) as CliName[]): Promise<Record<CliName, InstalledCli>> {
  const results = await Promise.all(names.map((name) => installCli(name)));
  return Object.fromEntries(results.map((r) => [r.name, r])) as Record<CliName, InstalledCli>;
}

export async function installCli(name: CliName): Promise<InstalledCli> {
  const { pkg, version, bin } = CLI_PACKAGES[name];
  return { name, ...(await installPackage(name, pkg, version, bin)) };
}

/**
 * Installs (or reuses) one registry package into its own folder of the cache, `<cache>/<dir>`; `bin` names the
 * executable it puts in node_modules/.bin. Never throws: a package that cannot be had comes back with `problem`.
 */
export async function installPackage(dir: string, pkg: string, version: string, bin: string): Promise<Omit<InstalledCli, 'name'>> {
  const prefix = path.join(cliCacheDir(), dir);
  // One installer of a folder at a time: test runs on one machine share the cache, and an install replaces the
  // folder whole, under another run that may be reusing it. The lock is refreshed while held (an install takes minutes).
  let release: () => Promise<void>;
  try {
    mkdirSync(cliCacheDir(), { recursive: true });
    release = await lockfile.lock(prefix, {
      realpath: false,
      lockfilePath: `${prefix}.installing`,
      stale: 30_000,
      retries: { retries: Math.ceil((2 * INSTALL_TIMEOUT_MS) / 1000), factor: 1, minTimeout: 1000, maxTimeout: 1000 },
    });
  } catch (e) {
    return { version, installed: false, ms: 0, problem: `${pkg}@${version}: the cache folder's install lock: ${(e as Error).message}` };
  }
  try {
    return await installUnlocked(prefix, pkg, version, bin);
  } finally {
    await release().catch(() => {});
  }
}

async function installUnlocked(prefix: string, pkg: string, version: string, bin: string): Promise<Omit<InstalledCli, 'name'>> {
  const binPath = path.join(prefix, 'node_modules', '.bin', bin);
  const started = Date.now();
  if (installedVersion(prefix, pkg) === version && existsSync(binPath)) {
    return { bin: binPath, version, installed: false, ms: Date.now() - started };
  }
  // A half-written or other-version install is replaced whole.
  rmSync(prefix, { recursive: true, force: true });
  mkdirSync(prefix, { recursive: true });
  const npm = await run(
    'npm',
    ['install', '--prefix', prefix, '--no-save', '--no-audit', '--no-fund', '--no-package-lock', '--loglevel=error', `${pkg}@${version}`],
    INSTALL_TIMEOUT_MS,
  );
  const ms = Date.now() - started;
  if (npm.code === 0 && installedVersion(prefix, pkg) === version && existsSync(binPath)) {
    return { bin: binPath, version, installed: true, ms };
  }
  const why = npm.timedOut ? `npm install timed out after ${INSTALL_TIMEOUT_MS / 1000} s` : `npm install exited ${npm.code}`;
  return { version, installed: false, ms, problem: `${pkg}@${version}: ${why}: ${npm.output.trim().split('\n').slice(-3).join(' | ')}` };
}

function installedVersion(prefix: string, pkg: string): string | undefined {
  try {
    const json = JSON.parse(readFileSync(path.join(prefix, 'node_modules', pkg, 'package.json'), 'utf8')) as { version?: string };
    return json.version;
  } catch {
    return undefined;
  }
}

interface RunResult {
  code: number | null;
  timedOut: boolean;
  /** The last 4 KiB of stdout+stderr. */
  output: string;
}

/** Runs a command in its own process group and kills the whole group at the deadline. */
function run(command: string, args: string[], timeoutMs: number): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
    let output = '';
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString('utf8')).slice(-4096);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }, timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      resolve({ code: null, timedOut, output: String(err) });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, timedOut, output });
    });
  });
}
