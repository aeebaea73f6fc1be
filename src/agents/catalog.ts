import fs from 'node:fs';
import path from 'node:path';
import type { Settings } from '../config.js';
import { errnoCode } from '../errors.js';
import { realpathOf, realpathOrNull } from '../realpath.js';
import { parseAgentFile, type AgentFileMeta, type ParseResult } from './definition.js';
import type { AgentDefinition, AgentSource, Backend } from './types.js';

/** docs/agents.md: larger agent files are refused unread. */
export const MAX_AGENT_FILE_BYTES = 64 * 1024;

export interface RefusedAgent {
  name?: string;
  /** The path the file (or directory) was reached by. */
  path: string;
  source: AgentSource;
  /** Which rule or key, and why; never the file's contents. */
  reason: string;
}

export interface Catalog {
  agents: Map<string, AgentDefinition>;
  refused: RefusedAgent[];
  /** The server's working directory, resolved (realpath when it exists). */
  projectDir: string;
  projectTrusted: boolean;
}

interface AgentDir {
  dir: string;
  source: AgentSource;
  /** Claude Code's own directory: its files always run with backend claude. */
  fixedBackend?: Backend;
  /** Project directories must stay inside the project. */
  mustBeInside?: string;
}

/**
 * Reads every agent definition the server may run, in the order of docs/agents.md. Synchronous: it reads at most a few
 * directories of small files, and callers want one consistent snapshot.
 */
export function loadCatalog(opts: { settings: Settings; bundledDir: string }): Catalog {
  const { settings } = opts;
  const refused: RefusedAgent[] = [];
  const projectDir = realpathOrNull(settings.cwd) ?? path.resolve(settings.cwd);
  const projectTrusted = isProjectTrusted(projectDir, settings);

  const operatorDirs: AgentDir[] = [
    ...settings.agentsPath.map((dir): AgentDir => ({ dir, source: 'operator' })),
    { dir: path.join(settings.home, 'agents'), source: 'home' },
    { dir: opts.bundledDir, source: 'bundled' },
  ];
  // Among operator directories the first to define a name wins: the operator overrides home, home overrides bundled.
  const operator = new Map<string, AgentDefinition>();
  for (const d of operatorDirs) {
    for (const def of readAgentDir(d, true, settings.maxTimeoutMs, refused)) {
      if (!operator.has(def.name)) operator.set(def.name, def);
    }
  }

  const agents = new Map(operator);
  const projectDirs: AgentDir[] = [
    { dir: path.join(projectDir, '.subagents', 'agents'), source: 'project', mustBeInside: projectDir },
    { dir: path.join(projectDir, '.claude', 'agents'), source: 'project', fixedBackend: 'claude', mustBeInside: projectDir },
  ];
  // .subagents/agents/ comes first, so a project can override one of its Claude Code agents for this server only.
  const project = new Set<string>();
  for (const d of projectDirs) {
    for (const def of readAgentDir(d, projectTrusted, settings.maxTimeoutMs, refused)) {
      if (project.has(def.name)) continue;
      if (!projectTrusted && operator.has(def.name)) {
        // An untrusted repository could otherwise replace an agent the operator relies on with its own prompt.
        refused.push({ name: def.name, path: def.path, source: 'project', reason: `shadows the ${operator.get(def.name)!.source} agent of the same name, which an untrusted project may not do; trust the project with SUBAGENTS_TRUST or SUBAGENTS_ROOTS` });
        continue;
      }
      project.add(def.name);
      agents.set(def.name, def);
    }
  }
  return { agents, refused, projectDir, projectTrusted };
}

/**
 * Project definitions are trusted only when the working directory is inside a root the operator named explicitly
 * (SUBAGENTS_ROOTS / --root, not the client's roots) or one listed in SUBAGENTS_TRUST. Both sides are realpaths, so a
 * symlinked checkout cannot pose as a trusted one.
 */
export function isProjectTrusted(projectDir: string, settings: Pick<Settings, 'explicitRoots' | 'trust'>): boolean {
  const trustedRoots = [...(settings.explicitRoots ?? []), ...settings.trust];
  return trustedRoots.some((root) => {
    const real = realpathOrNull(root);
    return real !== null && isInside(real, projectDir);
  });
}

/**
 * The accepted definitions of one directory, sorted by file name; everything refused goes to `outer`. Within one
 * directory a name defined twice is ambiguous: the first file by name wins, the others are refused.
 */
function readAgentDir(d: AgentDir, trusted: boolean, maxTimeoutMs: number, outer: RefusedAgent[]): AgentDefinition[] {
  let dirReal: string;
  let entries: string[];
  let dirKey: string | null;
  const terms = JSON.stringify([d.dir, d.source, d.fixedBackend ?? null, d.mustBeInside ?? null, trusted, maxTimeoutMs]);
  try {
    dirReal = realpathOf(d.dir);
    const st = fs.statSync(dirReal, { bigint: true });
    if (!st.isDirectory()) return [];
    dirKey = settledKey(st);
    const hit = dirKey === null ? undefined : dirReads.get(dirReal);
    if (hit && hit.dirKey === dirKey && hit.terms === terms && hit.files.every(([name, key]) => fileKeyOf(path.join(dirReal, name)) === key)) {
      outer.push(...structuredClone(hit.refused));
      return structuredClone(hit.accepted);
    }
    entries = fs.readdirSync(dirReal);
  } catch (e) {
    const code = errnoCode(e);
    if (code === 'ENOENT' || code === 'ENOTDIR') return []; // no such directory: nothing defined there
    outer.push({ path: d.dir, source: d.source, reason: `the directory cannot be read (${code ?? 'error'})` });
    return [];
  }
  if (d.mustBeInside !== undefined && !isInside(d.mustBeInside, dirReal)) {
    // A repository's `.claude/agents` linked to somewhere else would read files the project does not own.
    outer.push({ path: d.dir, source: d.source, reason: 'the directory is a symlink that leaves the project; its files are not read' });
    return [];
  }

  const accepted: AgentDefinition[] = [];
  const refused: RefusedAgent[] = [];
  const firstFileOf = new Map<string, string>();
  // Dot files are skipped: editors leave lock files and backups there (emacs `.#x.md` is a dangling symlink).
  const names = entries.filter((n) => n.endsWith('.md') && !n.startsWith('.')).sort();
  // Each file's identity before it is read: a change after this look makes the next look differ.
  const files = names.map((n): [string, string | null] => [n, fileKeyOf(path.join(dirReal, n))]);
  for (const entry of names) {
    const reachedBy = path.join(d.dir, entry);
    const read = readAgentFile(dirReal, entry);
    if (!read.ok) {
      refused.push({ path: reachedBy, source: d.source, reason: read.reason });
      continue;
    }
    const parsed = parseRemembered(read.bytes, {
      path: read.realPath,
      source: d.source,
      trusted,
      maxTimeoutMs,
      ...(d.fixedBackend !== undefined ? { defaultBackend: d.fixedBackend, fixedBackend: d.fixedBackend } : {}),
    });
    if (!parsed.ok) {
      refused.push({ ...(parsed.name !== undefined ? { name: parsed.name } : {}), path: reachedBy, source: d.source, reason: parsed.reason });
      continue;
    }
    const earlier = firstFileOf.get(parsed.def.name);
    if (earlier !== undefined) {
      refused.push({ name: parsed.def.name, path: reachedBy, source: d.source, reason: `duplicate name: ${earlier} in the same directory defines it first` });
      continue;
    }
    firstFileOf.set(parsed.def.name, entry);
    accepted.push(parsed.def);
  }
  outer.push(...refused);
  if (dirKey !== null && files.every(([, key]) => key !== null)) {
    if (dirReads.size >= MAX_REMEMBERED_DIRS) dirReads.clear();
    dirReads.set(dirReal, { dirKey, terms, files: files as Array<[string, string]>, accepted: structuredClone(accepted), refused: structuredClone(refused) });
  } else {
    dirReads.delete(dirReal);
  }
  return accepted;
}

/**
 * The last read of each agent directory, reused while the directory and each of its files are as they were: same
 * inode, size, modification and change times (a directory's times change when an entry is added, removed or renamed;
 * a file's change time whenever it is written, renamed or its mode changes, and nobody can set it back). Every launch
 * resolves its agents from the directories as they are now (an edit takes effect at the next launch); reading and
 * checking every file again was most of a launch's catalog work. Only identities older than the clock's granularity
 * count (`settledKey`): a file written twice within one tick of the file system's clock keeps its times.
 */
interface DirRead { dirKey: string; terms: string; files: Array<[string, string]>; accepted: AgentDefinition[]; refused: RefusedAgent[] }
const dirReads = new Map<string, DirRead>();
const MAX_REMEMBERED_DIRS = 64;
/** File times are kernel ticks (a few ms); an identity is trusted once its latest time is this far in the past. */
const SETTLED_MS = 1000n;

function settledKey(st: fs.BigIntStats): string | null {
  const latestNs = st.mtimeNs > st.ctimeNs ? st.mtimeNs : st.ctimeNs;
  if (BigInt(Date.now()) * 1_000_000n - latestNs < SETTLED_MS * 1_000_000n) return null;
  return `${st.dev}:${st.ino}:${st.size}:${st.mode}:${st.mtimeNs}:${st.ctimeNs}`;
}

/** A directory entry's identity (null: missing, too recent to trust, or a symlink, whose target may change unseen). */
function fileKeyOf(file: string): string | null {
  try {
    const st = fs.lstatSync(file, { bigint: true });
    return st.isSymbolicLink() ? null : settledKey(st);
  } catch {
    return null;
  }
}

/**
 * The last parse of each file, by the exact bytes read and the exact terms they were read under. Every launch reads
 * the catalog again (an edit takes effect at the next launch); parsing the same unchanged YAML each time was ~2 ms
 * of a launch's CPU. A hit is a fresh copy, so no caller can change what a later launch gets.
 */
const parses = new Map<string, { bytes: Buffer; terms: string; result: ParseResult }>();
const MAX_REMEMBERED_PARSES = 256;

function parseRemembered(bytes: Buffer, meta: AgentFileMeta): ParseResult {
  const terms = JSON.stringify([meta.path, meta.source, meta.trusted, meta.maxTimeoutMs, meta.defaultBackend ?? null, meta.fixedBackend ?? null]);
  const hit = parses.get(meta.path);
  if (hit && hit.terms === terms && hit.bytes.equals(bytes)) return structuredClone(hit.result);
  const result = parseAgentFile(bytes, meta);
  if (parses.size >= MAX_REMEMBERED_PARSES) parses.clear();
  parses.set(meta.path, { bytes: Buffer.from(bytes), terms, result: structuredClone(result) });
  return result;
}

type FileRead = { ok: true; bytes: Buffer; realPath: string } | { ok: false; reason: string };

/**
 * One buffer for every file read (the reads are synchronous), and only what was read is copied out: a fresh zeroed
 * 64 KiB per file, every launch re-reading every agent file, was ~half of a 30-agent catalog's CPU (the alloc and its GC).
 */
const readBuffer = Buffer.allocUnsafe(MAX_AGENT_FILE_BYTES + 1);

/**
 * Reads one file of a directory, refusing what a hostile repository could plant: a symlink out of the directory
 * (to ~/.ssh/config, say), a FIFO or device that would block or never end, a huge file.
 */
function readAgentFile(dirReal: string, entry: string): FileRead {
  const full = path.join(dirReal, entry);
  let realPath = full;
  try {
    // An entry that is not a symlink, in a directory already resolved, is its own realpath: only links are resolved.
    if (fs.lstatSync(full).isSymbolicLink()) realPath = realpathOf(full);
  } catch (e) {
    const code = errnoCode(e);
    return { ok: false, reason: code === 'ENOENT' ? 'a symlink to nothing' : `the file cannot be read (${code ?? 'error'})` };
  }
  if (!isInside(dirReal, realPath)) {
    return { ok: false, reason: 'reached through a symlink that leaves its directory' };
  }
  // O_NOFOLLOW: the realpath was just checked; if it is swapped for a symlink before the open, the open fails instead
  // of following it. O_NONBLOCK: a FIFO put in its place opens without waiting for a writer (then fails isFile).
  const flags = fs.constants.O_RDONLY | (fs.constants.O_NOFOLLOW ?? 0) | (fs.constants.O_NONBLOCK ?? 0);
  let fd: number;
  try {
    fd = fs.openSync(realPath, flags);
  } catch (e) {
    const code = errnoCode(e);
    return { ok: false, reason: code === 'ELOOP' ? 'reached through a symlink that changed while being read' : `the file cannot be read (${code ?? 'error'})` };
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) return { ok: false, reason: 'not a regular file' };
    if (st.size > MAX_AGENT_FILE_BYTES) return { ok: false, reason: `the file is ${st.size} bytes, over the ${MAX_AGENT_FILE_BYTES / 1024} KiB limit` };
    // Read at most one byte past the limit, so a file growing after fstat is still caught and memory stays bounded.
    const buf = readBuffer;
    let length = 0;
    for (;;) {
      const n = fs.readSync(fd, buf, length, buf.length - length, null);
      if (n === 0) break;
      length += n;
      if (length === buf.length) return { ok: false, reason: `the file is over the ${MAX_AGENT_FILE_BYTES / 1024} KiB limit` };
    }
    return { ok: true, bytes: Buffer.from(buf.subarray(0, length)), realPath };
  } catch (e) {
    return { ok: false, reason: `the file cannot be read (${errnoCode(e) ?? 'error'})` };
  } finally {
    fs.closeSync(fd);
  }
}


/** `child` is `parent` or below it (both absolute and resolved). */
function isInside(parent: string, child: string): boolean {
  const rel = path.relative(parent, child);
  return rel === '' || (!rel.startsWith('..' + path.sep) && rel !== '..' && !path.isAbsolute(rel));
}
