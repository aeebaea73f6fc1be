import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';

export interface DetachedOptions {
  cwd: string;
  env: Record<string, string>;
  /** Appended to, created 0600; never followed through a symlink. */
  logFile: string;
}

/**
 * Starts a program in its own session and process group with stdio on raw file descriptors, so it keeps running
 * (and keeps its log) after we exit. Node built-ins only: the spawner worker loads this and nothing else.
 */
export function startDetached(argv: string[], o: DetachedOptions): ChildProcess {
  // O_NOFOLLOW: a symlink planted at the log's path must not redirect the runner's output elsewhere.
  const fd = fs.openSync(o.logFile, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_APPEND | fs.constants.O_NOFOLLOW, 0o600);
  try {
    const child = spawn(argv[0]!, argv.slice(1), { cwd: o.cwd, env: o.env, detached: true, stdio: ['ignore', fd, fd], windowsHide: true });
    child.on('error', () => {}); // reported through the handshake, not as an unhandled event
    child.unref();
    return child;
  } finally {
    fs.closeSync(fd);
  }
}
