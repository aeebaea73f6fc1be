import fs from 'node:fs';
import path from 'node:path';
import { adapterFor } from '../agents/adapters/index.js';
import { expandAgentDir } from '../agents/adapters/command.js';
import { loadCatalog, type Catalog, type RefusedAgent } from '../agents/catalog.js';
import { loadYamlParser } from '../agents/definition.js';
import { resolveBin } from '../agents/resolve-bin.js';
import type { AgentDefinition, FrozenAgent } from '../agents/types.js';
import { SubagentError } from '../errors.js';
import { readJsonFile } from '../store/json-file.js';
import { writeFileAtomic } from '../store/atomic-write.js';
import { BUNDLED_AGENTS_DIR, type ManagerContext } from './context.js';

/**
 * A definition as a nested server reads it from its tree's snapshot: with the executable the root server resolved.
 * A nested server runs with an agent's environment, which has no SUBAGENTS_BIN_<BACKEND> (and maybe another PATH).
 */
type SnapshotAgent = AgentDefinition & { rootBin?: string };

/**
 * `resolveBin` remembering its answers, for one look at a whole catalog: agents of one backend (or one command)
 * resolve alike at one moment, so each executable is searched for once (30 agents: ~2 ms of every launch).
 */
export function resolverForOneLook(): typeof resolveBin {
  const found = new Map<string, string | null>();
  return (name, o = {}) => {
    const key = JSON.stringify([name, o.override ?? null, o.pathEnv ?? null]);
    let bin = found.get(key);
    if (bin === undefined) found.set(key, (bin = resolveBin(name, o)));
    return bin;
  };
}

/** Where a backend's executable is, or why it is unusable. */
export function locateBackend(def: SnapshotAgent, ctx: Pick<ManagerContext, 'settings' | 'env'>, resolve = resolveBin): { bin: string | null; problem: string | null } {
  const adapter = adapterFor(def.backend);
  if (!adapter) return { bin: null, problem: `backend ${def.backend} is not supported by this build` };
  const unsupported = adapter.unsupported?.(def) ?? null;
  if (unsupported) return { bin: null, problem: unsupported };
  // Resolved as the tree's root resolved it, while that file is still there.
  if (def.rootBin !== undefined && resolve(def.rootBin) !== null) return { bin: def.rootBin, problem: null };
  if (def.backend === 'command') {
    const argv0 = expandAgentDir(def.command?.[0] ?? '', def.path);
    const bin = resolve(argv0, { pathEnv: ctx.env.PATH });
    // The whole path: which file is missing or not executable is the point. A relative one is never looked up.
    const relative = argv0.includes('/') && !path.isAbsolute(argv0);
    return bin ? { bin, problem: null } : { bin: null, problem: `command ${JSON.stringify(argv0.slice(0, 300))} ${relative ? 'is a relative path, which is never used: give an absolute path, ${agentDir}/… for a file beside the agent file, or a name on PATH' : 'was not found or is not executable'}` };
  }
  const override = ctx.settings.bins[def.backend];
  const bin = resolve(adapter.binName, { override, pathEnv: ctx.env.PATH });
  if (bin) return { bin, problem: null };
  return {
    bin: null,
    problem: override
      ? `SUBAGENTS_BIN_${def.backend.toUpperCase()} does not name an executable file`
      : `the ${adapter.binName} CLI was not found on PATH; install it or set SUBAGENTS_BIN_${def.backend.toUpperCase()} to its absolute path`,
  };
}

/** The catalog a launch resolves agents from. Nested launches use the snapshot their tree's root froze. */
export async function catalogFor(ctx: ManagerContext): Promise<Map<string, AgentDefinition>> {
  if (ctx.nesting) {
    const snap = readJsonFile<AgentDefinition[]>(catalogSnapshotFile(ctx, ctx.nesting.rootRunId));
    // A child cannot add agents by writing files: only what the root server resolved exists.
    return new Map((snap ?? []).map((d) => [d.name, d]));
  }
  await loadYamlParser();
  return loadCatalog({ settings: ctx.settings, bundledDir: BUNDLED_AGENTS_DIR }).agents;
}

export async function loadFullCatalog(ctx: Pick<ManagerContext, 'settings'>): Promise<Catalog> {
  await loadYamlParser();
  return loadCatalog({ settings: ctx.settings, bundledDir: BUNDLED_AGENTS_DIR });
}

export function catalogSnapshotFile(ctx: Pick<ManagerContext, 'store'>, rootRunId: string): string {
  return path.join(ctx.store.paths(rootRunId).dir, CATALOG_SNAPSHOT_NAME);
}

/** The catalog snapshot's file name in a root run's directory (written with the run: RunStore.prepare's `extra`). */
export const CATALOG_SNAPSHOT_NAME = 'catalog.json';

/** The snapshot a top-level run freezes: nested launches of its tree resolve agents only from it. */
export function catalogSnapshotJson(ctx: ManagerContext, agents: Map<string, AgentDefinition>): string {
  const resolveOnce = resolverForOneLook();
  const snapshot: SnapshotAgent[] = [...agents.values()].map((d) => {
    const { bin } = locateBackend(d, ctx, resolveOnce);
    return bin ? { ...d, rootBin: bin } : d;
  });
  return JSON.stringify(snapshot);
}

/** Freezes one agent for a step: the definition as read now, and its resolved executable. */
export function freezeAgent(ctx: ManagerContext, catalog: Map<string, AgentDefinition>, name: string): FrozenAgent {
  const def = catalog.get(name);
  if (!def) {
    const known = [...catalog.keys()].sort().slice(0, 20).join(', ') || 'none';
    // A file that defines the name but was refused is what the caller needs to hear about (the agents tool lists it too).
    const refused = ctx.nesting ? undefined : refusedNamed(ctx, name);
    const why = refused ? `: its file ${JSON.stringify(refused.path)} (${refused.source}) was refused: ${refused.reason}` : '';
    throw new SubagentError('UNKNOWN_AGENT', `no agent named ${JSON.stringify(name.slice(0, 64))}${why}; known agents: ${known}. Call the agents tool to list them.`);
  }
  const { bin, problem } = locateBackend(def, ctx);
  if (!bin) throw new SubagentError('AGENT_UNAVAILABLE', `agent ${def.name} (backend ${def.backend}) cannot run here: ${problem}.`);
  const { rootBin: _rootBin, ...frozen } = def as SnapshotAgent;
  return { ...frozen, bin };
}

/** The refusal of a file that defines `name`, if one was refused (the catalog is cached: this costs no reread). */
function refusedNamed(ctx: ManagerContext, name: string): RefusedAgent | undefined {
  try {
    // A file refused before its name could be read (its YAML) is known by its file name.
    return loadCatalog({ settings: ctx.settings, bundledDir: BUNDLED_AGENTS_DIR }).refused.find((r) => (r.name ?? path.basename(r.path, '.md')) === name);
  } catch {
    return undefined;
  }
}

export function fileExists(p: string): boolean {
  try { return fs.statSync(p).isFile(); } catch { return false; }
}
