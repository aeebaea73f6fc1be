import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { claudeRefusesAsRoot } from '../agents/adapters/claude.js';
import { adapterFor } from '../agents/adapters/index.js';
import { shortError } from '../agents/adapters/shared.js';
import { buildAgentEnv } from '../agents/agent-env.js';
import { resolveBin } from '../agents/resolve-bin.js';
import { BACKENDS, type Backend, type Permission } from '../agents/types.js';
import { locateBackend, loadFullCatalog, catalogFor, resolverForOneLook } from './agent-resolver.js';
import type { ManagerContext } from './context.js';

export interface AgentListing {
  agents: Array<{ name: string; description: string; backend: string; source: string; trusted: boolean; available: boolean; problem?: string; warnings?: string[]; models?: string[]; isolation?: 'worktree' }>;
  refused: Array<{ name?: string; path: string; source: string; reason: string }>;
}

/** The `agents` tool: what can be launched here, and which files were refused (reasons only, never contents). */
export async function listAgents(ctx: ManagerContext): Promise<AgentListing> {
  const full = ctx.nesting ? null : await loadFullCatalog(ctx);
  const agents = full ? full.agents : await catalogFor(ctx);
  const resolve = resolverForOneLook();
  return {
    agents: [...agents.values()].sort((a, b) => a.name.localeCompare(b.name)).map((d) => {
      const { problem } = locateBackend(d, ctx, resolve);
      const warnings = definitionWarnings(d, { uid: process.getuid?.(), agentEnv: () => agentEnvOf(d, ctx) });
      return {
        name: d.name, description: d.description, backend: d.backend, source: d.source, trusted: d.trusted,
        available: problem === null, ...(problem ? { problem } : {}), ...(warnings.length ? { warnings } : {}),
        ...(d.models ? { models: d.models } : {}),
        ...(d.isolation ? { isolation: d.isolation } : {}),
      };
    }),
    refused: (full?.refused ?? []).map((r) => ({ ...(r.name ? { name: r.name } : {}), path: r.path, source: r.source, reason: r.reason })),
  };
}

export const CLAUDE_ROOT_WARNING =
  'permissions: full runs Claude Code with --permission-mode=bypassPermissions, which it refuses under root (uid 0): every run of this agent here fails ("cannot be used with root/sudo privileges"). Run the server as a non-root user, give the agent a tools list (full with tools approves just those instead of bypassing), lower it to permissions: edit, or, inside a disposable sandbox, pass IS_SANDBOX=1 through SUBAGENTS_PASS_ENV.';

/**
 * What a definition asks for that its backend ignores or cannot do here: the agent stays launchable (so it is no
 * `problem` — the CLI may be a wrapper, and the condition can change without the file changing), but its author
 * would otherwise learn it only from a failed run. A silent `delegate: true` on a CLI that cannot take MCP servers
 * would leave them expecting nested runs; a claude agent at `full` under root fails every run.
 */
export function definitionWarnings(
  d: { backend: Backend; delegate: boolean; permissions: Permission; tools?: string[] },
  here: { uid: number | undefined; agentEnv: () => Record<string, string> },
): string[] {
  const warnings: string[] = [];
  if (d.delegate && adapterFor(d.backend)?.supportsDelegate === false) {
    warnings.push(`delegate: true is ignored: the ${d.backend} backend cannot be given this server as an MCP server, so this agent cannot launch runs of its own. Remove delegate, or use a backend that supports it (${BACKENDS.filter((b) => adapterFor(b)?.supportsDelegate).join(', ')}).`);
  }
  // Claude lets root bypass permissions only when IS_SANDBOX=1 reaches it, which this server never sets itself.
  if (d.backend === 'claude' && here.uid === 0 && claudeRefusesAsRoot(d.permissions, d.tools) && here.agentEnv().IS_SANDBOX !== '1') {
    warnings.push(CLAUDE_ROOT_WARNING);
  }
  return warnings;
}

/** The environment a run of this agent would get from this process (as the runner builds it, minus its additions). */
function agentEnvOf(d: { backend: Backend; env: string[] }, ctx: Pick<ManagerContext, 'settings' | 'env'>): Record<string, string> {
  return buildAgentEnv({ source: ctx.env, passEnv: ctx.settings.passEnv, credentialEnv: adapterFor(d.backend)?.credentialEnv ?? [], agentEnv: d.env, extra: {} });
}

/** One agent CLI as this process finds it: where, which version, and why it is unusable if it is. */
export interface BackendReport {
  backend: Backend;
  found: boolean;
  /** The executable that would run (SUBAGENTS_BIN_<BACKEND>, else the first on PATH). */
  path?: string;
  /** First line of `<bin> <versionArgs>`; absent while it is still being read or when the CLI failed to answer. */
  version?: string;
  problem?: string;
}

/** How long one `--version` may take before its process group is killed and the CLI reported as not answering. */
export const VERSION_TIMEOUT_MS = 5000;
const MAX_VERSION_OUTPUT = 64 * 1024;

interface Probe {
  done: boolean;
  version?: string;
  problem?: string;
  settled: Promise<void>;
}

/**
 * Version probes of this process, by executable and its identity on disk (an upgraded CLI is probed again). A CLI's
 * version does not change under a running server, and `agents` may be called often: each binary runs once.
 */
const probes = new Map<string, Probe>();

/**
 * Every agent backend (not `command`): found or not, its version, its problem. Version probes start on the first
 * call (lazily, never at start-up), run concurrently, and are cached for the life of the process. The call waits for
 * them at most `waitMs` (default: until each has answered or timed out); a probe still running then is reported
 * without a version and keeps running, so a later call has it.
 */
export async function listBackends(ctx: Pick<ManagerContext, 'settings' | 'env'>, o: { waitMs?: number } = {}): Promise<BackendReport[]> {
  const entries = BACKENDS.filter((b) => b !== 'command').map((backend) => locate(backend, ctx));
  const pending = entries.flatMap((e) => (e.probe && !e.probe.done ? [e.probe.settled] : []));
  if (pending.length > 0) {
    let timer: NodeJS.Timeout | undefined;
    const bound = o.waitMs === undefined ? [] : [new Promise<void>((r) => { timer = setTimeout(r, o.waitMs); })];
    await Promise.race([Promise.all(pending), ...bound]);
    clearTimeout(timer);
  }
  return entries.map(({ report, probe }) => {
    if (!probe?.done) return report;
    return { ...report, ...(probe.version ? { version: probe.version } : {}), ...(probe.problem ? { problem: probe.problem } : {}) };
  });
}

function locate(backend: Backend, ctx: Pick<ManagerContext, 'settings' | 'env'>): { report: BackendReport; probe?: Probe } {
  const adapter = adapterFor(backend);
  if (!adapter) return { report: { backend, found: false, problem: `backend ${backend} is not supported by this build` } };
  const override = ctx.settings.bins[backend];
  const bin = resolveBin(adapter.binName, { override, pathEnv: ctx.env.PATH });
  const variable = `SUBAGENTS_BIN_${backend.toUpperCase()}`;
  if (!bin) {
    const problem = override
      ? `${variable} does not name an executable file`
      : `${adapter.binName} not found on PATH (install it, or set ${variable} to its absolute path)`;
    return { report: { backend, found: false, problem } };
  }
  let key = bin;
  try {
    const st = fs.statSync(bin);
    key = `${bin}\u0000${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
  } catch { /* vanished since: probing reports it */ }
  let probe = probes.get(key);
  if (!probe) {
    // Run it as an agent would be run: the same allowlisted environment (no server secrets), no stdin.
    const env = buildAgentEnv({ source: ctx.env, passEnv: ctx.settings.passEnv, credentialEnv: adapter.credentialEnv, agentEnv: [], extra: {} });
    const args = adapter.versionArgs.length > 0 ? adapter.versionArgs : ['--version'];
    const p: Probe = { done: false, settled: Promise.resolve() };
    p.settled = readVersion(bin, args, env, VERSION_TIMEOUT_MS).then((r) => {
      Object.assign(p, r, { done: true });
    });
    probes.set(key, p);
    probe = p;
  }
  return { report: { backend, found: true, path: bin }, probe };
}

/**
 * `<bin> <args>` in its own process group, bounded: past `timeoutMs` the whole group is killed (a CLI is often a
 * wrapper script that starts the real program), so a hung CLI leaves nothing behind. Never rejects.
 */
function readVersion(bin: string, args: string[], env: Record<string, string>, timeoutMs: number): Promise<{ version?: string; problem?: string }> {
  const label = `${path.basename(bin)} ${args.join(' ')}`;
  return new Promise((resolve) => {
    // Windows refuses to spawn .cmd/.bat files without a shell (their CLIs are installed as such); args are fixed.
    const shell = process.platform === 'win32' && /\.(cmd|bat)$/i.test(bin);
    let child;
    try {
      child = spawn(shell ? `"${bin}"` : bin, args, {
        env, stdio: ['ignore', 'pipe', 'pipe'], detached: process.platform !== 'win32', windowsHide: true, shell,
      });
    } catch (e) {
      resolve({ problem: `${label} could not be started (${(e as NodeJS.ErrnoException).code ?? 'error'})` });
      return;
    }
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outBytes = 0;
    const collect = (into: Buffer[]) => (c: Buffer) => {
      if (outBytes >= MAX_VERSION_OUTPUT) return;
      outBytes += c.length;
      into.push(c);
    };
    child.stdout!.on('data', collect(out));
    child.stderr!.on('data', collect(err));
    let timedOut = false;
    let finished = false;
    const killGroup = () => {
      try {
        if (child.pid !== undefined && process.platform !== 'win32') process.kill(-child.pid, 'SIGKILL');
        else child.kill('SIGKILL');
      } catch { /* already gone */ }
    };
    const timer = setTimeout(() => { timedOut = true; killGroup(); }, timeoutMs);
    const finish = (code: number | null, signal: NodeJS.Signals | null, spawnError?: string) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      child.stdout!.destroy();
      child.stderr!.destroy();
      if (spawnError) return resolve({ problem: `${label} could not be started (${spawnError})` });
      if (timedOut) return resolve({ problem: `${label} did not answer within ${timeoutMs} ms` });
      const firstLine = (bufs: Buffer[]) => Buffer.concat(bufs).toString('utf8').split(/\r?\n/).map((l) => l.trim()).find((l) => l !== '') ?? '';
      const clean = (s: string) => s.replace(/[\u0000-\u001f\u007f]/g, '').slice(0, 80);
      if (code !== 0) {
        const why = shortError(firstLine(err) || firstLine(out)).slice(0, 160);
        return resolve({ problem: `${label} exited with ${code ?? signal ?? 'an error'}${why ? `: ${why}` : ''}` });
      }
      const version = clean(firstLine(out) || firstLine(err));
      resolve(version ? { version } : { problem: `${label} printed nothing` });
    };
    child.once('error', (e) => finish(null, null, (e as NodeJS.ErrnoException).code ?? 'error'));
    // A grandchild may keep the pipes open after the CLI exits: give the output a moment, then stop reading.
    child.once('exit', (code, signal) => { setTimeout(() => finish(code, signal), 200); });
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => finish(code, signal));
  });
}
