import { execa } from 'execa';

/**
 * One-shot git commands: an argv array (never a shell string), a time limit, and an environment of our own. Used
 * only for worktree isolation (docs/agents.md, "Worktree isolation"), and loaded only when a run asks for it.
 */

/** Why a git command did not give an answer. */
export type GitFailure = 'missing' | 'timeout' | 'failed' | 'aborted';

export class GitError extends Error {
  constructor(readonly failure: GitFailure, message: string, readonly exitCode: number | null = null, readonly stderr = '') {
    super(message);
  }
}

export interface GitOptions {
  /** Directory the command runs in (`git -C`). */
  cwd: string;
  timeoutMs: number;
  /** The git executable: an absolute path resolved once, or `git` (PATH). */
  git?: string;
  /** Extra variables (e.g. the commit's author); the rest of the environment is ours, see gitEnv. */
  env?: Record<string, string>;
  signal?: AbortSignal;
  /** Exit codes that are answers rather than failures (`diff --quiet` exits 1 when there are differences). */
  okExitCodes?: number[];
  /** Write stdout to this file (created 0600 under the runner's umask) instead of returning it. */
  stdoutFile?: string;
}

export interface GitResult { stdout: string; exitCode: number }

/**
 * Settings given on every call. The repository is the user's and may not be trusted: its hooks, fsmonitor command,
 * external diff and textconv drivers would run programs it names, so they are switched off. No automatic gc or
 * maintenance in the user's repository on our commits, no signing prompt.
 */
const SAFE_CONFIG = [
  '-c', 'core.hooksPath=/dev/null',
  '-c', 'core.fsmonitor=false',
  '-c', 'gc.auto=0',
  '-c', 'maintenance.auto=false',
  '-c', 'commit.gpgSign=false',
  '-c', 'advice.detachedHead=false',
];

/**
 * The environment of a git command: the process's own minus every GIT_* variable (a GIT_DIR or GIT_INDEX_FILE of the
 * caller's would point the command at another repository or index), no prompts, untranslated messages.
 */
export function gitEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GIT_')) env[k] = v;
  return { ...env, GIT_TERMINAL_PROMPT: '0', GIT_OPTIONAL_LOCKS: '0', LC_ALL: 'C', ...extra };
}

/** The umask git commands run with, when set (the runner: the user's own, see setGitUmask). */
let gitUmask: number | null = null;

/**
 * Git then creates files and directories as the user would: the worktree's checkout and the new branch's ref in the
 * user's repository, not the 0600/0700 of the runner's own umask.
 */
export function setGitUmask(umask: number): void {
  gitUmask = umask;
}

export async function git(args: string[], o: GitOptions): Promise<GitResult> {
  // The spawn happens inside the execa call, synchronously: the umask is the child's for that moment only.
  const previousUmask = gitUmask !== null ? process.umask(gitUmask) : null;
  let running;
  try {
    running = execa(o.git ?? 'git', [...SAFE_CONFIG, ...args], {
    cwd: o.cwd,
    env: gitEnv(o.env),
    extendEnv: false,
    shell: false,
    stdin: 'ignore',
    stdout: o.stdoutFile ? { file: o.stdoutFile } : 'pipe',
    timeout: o.timeoutMs,
    cancelSignal: o.signal,
    forceKillAfterDelay: 2000,
    reject: false,
    maxBuffer: 64 * 1024 * 1024,
    stripFinalNewline: true,
    encoding: 'utf8',
  });
  } finally {
    if (previousUmask !== null) process.umask(previousUmask);
  }
  const r = await running;
  const stderr = typeof r.stderr === 'string' ? r.stderr : '';
  const what = `git ${args[0] ?? ''}`;
  if (r.timedOut) throw new GitError('timeout', `${what} did not finish within ${o.timeoutMs} ms`);
  if (r.isCanceled) throw new GitError('aborted', `${what} was stopped`);
  if ((r as { code?: string }).code === 'ENOENT' && r.exitCode === undefined) {
    throw new GitError('missing', 'git is not installed or not on PATH');
  }
  const exitCode = r.exitCode ?? -1;
  if (exitCode !== 0 && !(o.okExitCodes ?? []).includes(exitCode)) {
    throw new GitError('failed', `${what} failed: ${firstLine(stderr) || `exit code ${exitCode}`}`, exitCode, stderr);
  }
  return { stdout: typeof r.stdout === 'string' ? r.stdout : '', exitCode };
}

/** git's own explanation, one line, bounded and printable (it may name paths; never file contents). */
export function firstLine(stderr: string): string {
  const line = stderr.split('\n').map((l) => l.trim()).find((l) => l.length > 0) ?? '';
  return line.replace(/[^\x20-\x7e]/g, '?').slice(0, 300);
}
