import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type net from 'node:net';
import { ownEndOf } from '../process/escape-tracker.js';
import { readIdentity, type ProcessIdentity } from '../process/identity.js';
import { openOutputChannel, type OutputChannel } from './output-channel.js';

/**
 * A pre-started agent process (docs/architecture.md, "The first agent of a warm runner"). Node starts a child by
 * forking itself, and a runner is a ~50 MiB process: `spawn` blocks its thread ~4–5 ms until the child has exec'd,
 * on every run's critical path. An idle warm runner starts a small `dash` instead, with the agent's stdio already in
 * place, blocked on a read. The run's first agent is then one exec of that process: the runner writes the agent's
 * invocation (working directory, umask, environment, argv — every word single-quoted, so nothing is interpreted) into
 * an unlinked 0600 file the stub holds, and sends one newline. The stub sources the file, which `exec`s the agent:
 * same pid, so the runner's exit status, process group and identity checks apply to the agent as to a spawned one.
 *
 * Used only where the result is exactly a spawn's: dash present (its exported environment is exactly the one
 * written: `PWD` and `OLDPWD` are unset), an executable found on the environment's `PATH`, an existing working
 * directory, variable names that are plain shell names and not the shell's own, and a small invocation. Anything
 * else, and every agent after the first, is spawned as before. A stub whose runner dies reads end-of-file and exits.
 */

/** Where dash lives (Debian and Ubuntu's /bin/sh); elsewhere no stub is used. */
const DASH = ['/bin/dash', '/usr/bin/dash'].find((p) => { try { fs.accessSync(p, fs.constants.X_OK); return true; } catch { return false; } });

/**
 * What the stub runs: wait for the go line on fd 4 (end-of-file: the runner is gone, exit), then source the
 * invocation from the file on fd 3. `/dev/fd/3` opens that file anew, so the unlinked file's content is read from
 * its start; dash marks the descriptor it reads a script through close-on-exec.
 */
const STUB_SCRIPT = 'IFS= read -r go <&4 || exit 0\nexec 4<&-\n. /dev/fd/3\nexit 127\n';

/** Variables dash sets or interprets itself: an environment carrying one is spawned as before. */
const SHELL_OWN = new Set(['PWD', 'OLDPWD', 'LINENO', 'PPID', 'OPTIND', 'OPTARG', 'IFS', 'PS1', 'PS2', 'PS4', 'ENV', 'MAIL', 'MAILPATH', 'MAILCHECK', 'HISTFILE', 'FCEDIT', 'SHELLOPTS']);
const SHELL_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** Larger invocations are spawned as before (a single argument may be at most 128 KiB on Linux anyway). */
const MAX_INVOCATION_BYTES = 64 * 1024;

/** One shell word, whatever the string holds: single quotes, each `'` closed, escaped and reopened. */
function quote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

export interface StubInvocation {
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  umask: number;
  /** Whether the agent reads its task on stdin (else its stdin is /dev/null, as spawn's 'ignore'). */
  stdin: boolean;
}

/** The file an argv[0] resolves to as execvp would find it with `env`'s PATH, or null. */
function resolvesToExecutable(command: string, env: Record<string, string>): boolean {
  const executable = (f: string) => {
    try { return fs.statSync(f).isFile() && (fs.accessSync(f, fs.constants.X_OK), true); } catch { return false; }
  };
  if (command.includes('/')) return executable(command);
  return (env.PATH ?? '').split(':').some((dir) => dir !== '' && executable(path.join(dir, command)));
}

/** The script that turns the stub into the agent, or null when this invocation must be spawned as before. */
export function stubScript(inv: StubInvocation): string | null {
  if (inv.argv.length === 0 || inv.argv.some((a) => a.includes('\0'))) return null;
  for (const [k, v] of Object.entries(inv.env)) if (!SHELL_NAME.test(k) || SHELL_OWN.has(k) || v.includes('\0')) return null;
  try { if (!fs.statSync(inv.cwd).isDirectory()) return null; } catch { return null; }
  if (!resolvesToExecutable(inv.argv[0]!, inv.env)) return null;
  const lines = [
    `cd -- ${quote(inv.cwd)} || exit 127`,
    'unset PWD OLDPWD',
    `umask ${(inv.umask & 0o777).toString(8).padStart(4, '0')}`,
    ...Object.entries(inv.env).map(([k, v]) => `export ${k}=${quote(v)}`),
    `exec 3<&-${inv.stdin ? '' : ' </dev/null'}`,
    `exec ${inv.argv.map(quote).join(' ')}`,
  ];
  const script = `${lines.join('\n')}\n`;
  return Buffer.byteLength(script) <= MAX_INVOCATION_BYTES ? script : null;
}

export class AgentStub {
  /** Where the agent's stdout chunks go once it runs (the step's capture). */
  onChunk: (chunk: Buffer) => void = () => {};
  private used = false;

  private constructor(
    readonly child: ChildProcess,
    readonly identity: ProcessIdentity,
    /** The agent's stdout as seen from the runner's side (for the escape tracker), read before our copy went. */
    readonly stdoutEnd: string | null,
    readonly channel: OutputChannel | null,
    private readonly scriptFd: number,
    private readonly go: net.Socket,
  ) {}

  /**
   * Starts a stub in `dir` (the warm directory: private, the idle runner's working directory); null where none can
   * be used (no dash, not Linux) or it could not be started. Blocks for one spawn: call it while idle.
   */
  static async start(dir: string): Promise<AgentStub | null> {
    if (!DASH || process.platform !== 'linux') return null;
    let scriptFd = -1;
    let channel: OutputChannel | null = null;
    try {
      // The invocation (with the agent's environment) lives only in this unlinked inode: no name to find it by.
      const file = path.join(dir, `.stub-${process.pid}-${randomBytes(6).toString('hex')}`);
      scriptFd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
      fs.unlinkSync(file);
      let stub: AgentStub | null = null;
      channel = await openOutputChannel(path.join(dir, `.stub-${process.pid}.sock`), (c) => stub?.onChunk(c));
      const child = spawn(DASH, ['-c', STUB_SCRIPT], {
        cwd: dir,
        env: {},
        stdio: ['pipe', channel?.agentEnd ?? 'pipe', 'pipe', scriptFd, 'pipe'],
        detached: false, // in the runner's group, as a spawned agent is
      });
      const stdoutEnd = ownEndOf(channel?.agentEnd ?? child.stdout);
      channel?.agentEnd.destroy();
      const started = await new Promise<boolean>((resolve) => {
        child.once('spawn', () => resolve(true));
        child.once('error', () => resolve(false));
      });
      const identity = started && child.pid !== undefined ? readIdentity(child.pid) : null;
      const go = child.stdio[4] as net.Socket | null;
      if (!identity || !go) {
        child.kill('SIGKILL');
        channel?.reader.destroy();
        fs.closeSync(scriptFd);
        return null;
      }
      for (const s of [child.stdin, child.stdout, child.stderr, go, channel?.reader]) s?.on('error', () => {});
      go.resume(); // read, so that the stub closing its end (at its exec) closes ours
      stub = new AgentStub(child, identity, stdoutEnd, channel, scriptFd, go);
      return stub;
    } catch {
      channel?.reader.destroy();
      channel?.agentEnd.destroy();
      if (scriptFd >= 0) try { fs.closeSync(scriptFd); } catch { /* closed */ }
      return null;
    }
  }

  /** Whether the stub is still waiting for its agent (it may have died: a stray signal to the runner's group). */
  get ready(): boolean {
    return !this.used && this.child.exitCode === null && this.child.signalCode === null;
  }

  /**
   * Turns the stub into the agent `script` describes (see `stubScript`). The caller then supervises `child`. Only a
   * script `stubScript` built may come here: against command injection through a task, a path or an environment value,
   * every word in it is single-quoted (`quote`), variable names are plain shell names, and the script travels in an
   * unlinked file, never on a command line.
   */
  exec(script: string): void {
    this.used = true;
    const bytes = Buffer.from(script);
    fs.writeSync(this.scriptFd, bytes, 0, bytes.length, 0);
    this.go.end('\n');
  }

  /** After its agent ended: our ends of its go line and script are closed (a warm runner must leave nothing open). */
  release(): void {
    try { fs.closeSync(this.scriptFd); } catch { /* closed at exec */ }
    this.go.destroy();
  }

  /** An unused stub: told to exit (end-of-file on its go line), its descriptors closed; resolves once it has exited. */
  async dispose(): Promise<void> {
    if (this.used) return;
    this.used = true;
    const exited = this.child.exitCode !== null || this.child.signalCode !== null
      ? Promise.resolve()
      : new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    try { fs.closeSync(this.scriptFd); } catch { /* closed */ }
    this.go.end();
    this.child.stdin?.destroy();
    await exited;
    this.child.stdout?.destroy();
    this.child.stderr?.destroy();
    this.go.destroy();
    this.channel?.reader.destroy();
  }
}
