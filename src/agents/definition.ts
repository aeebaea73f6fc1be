import { createHash } from 'node:crypto';
import type * as Yaml from 'yaml';
import * as z from 'zod';
import { BACKENDS, PERMISSIONS, type AgentDefinition, type AgentSource, type Backend } from './types.js';
import { isNeverPass, isNestingName } from './agent-env.js';

/** docs/agents.md: the name an agent is launched by. */
export const AGENT_NAME_RE = /^[a-z0-9][a-z0-9._-]{0,63}$/;
/** A portable environment variable name. */
export const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
/**
 * A model id goes onto a CLI's argv as a flag value: it may not start with `-` (it must never read as a flag) and holds
 * only the characters real ids use (`sonnet`, `claude-sonnet-4-5[1m]`, `openai/gpt-5`, `provider/model:high`).
 */
const MODEL_RE = /^[A-Za-z0-9][A-Za-z0-9._:/@+[\]-]{0,127}$/;

let yaml: Pick<typeof Yaml, 'parseDocument'> | null = null;

/**
 * Loads the YAML parser (its own ~110 KiB chunk, and a few MiB of memory once compiled): a server that never reads an
 * agent file never loads it. Await it before `parseAgentFile`; the catalog's async entry points do.
 */
export async function loadYamlParser(): Promise<void> {
  if (yaml) return;
  const m = await import('yaml');
  // yaml is CommonJS: Node's ESM gives named exports, esbuild's bundle only `default` (module.exports).
  yaml = m.default ?? m;
}

export interface AgentFileMeta {
  /** Absolute path of the file (recorded in the definition; never used to read). */
  path: string;
  source: AgentSource;
  trusted: boolean;
  /** The backend when the file names none (`claude` when absent). */
  defaultBackend?: Backend;
  /**
   * Set for Claude Code's own files (`.claude/agents/`): they always run on this backend, and a file naming another one
   * is refused rather than run differently from how Claude Code itself would run it.
   */
  fixedBackend?: Backend;
  maxTimeoutMs: number;
}

export type ParseResult =
  | { ok: true; def: AgentDefinition }
  /** `name` is set when the file's name was readable and valid, so a listing can say which agent was refused. */
  | { ok: false; reason: string; name?: string };

/**
 * Parses and validates one agent file. Reasons name the key that is wrong and why, never the file's contents: they are
 * shown to the model and an untrusted repository could otherwise smuggle text into it.
 * `text` may be the raw bytes, so the hash is of exactly what is on disk.
 */
export function parseAgentFile(text: string | Uint8Array, meta: AgentFileMeta): ParseResult {
  const bytes = typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
  let source: string;
  try {
    source = typeof text === 'string' ? text : new TextDecoder('utf-8', { fatal: true }).decode(text);
  } catch {
    return { ok: false, reason: 'the file is not valid UTF-8' };
  }
  const split = splitFrontMatter(source);
  if (!split) return { ok: false, reason: 'no front matter: the file must start with a "---" line and a closing "---" line must follow' };

  const parsed = parseFrontMatter(split.frontMatter);
  if (!parsed.ok) return parsed;
  const raw = parsed.value;
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    return { ok: false, reason: 'front matter must be a mapping of keys (name, description, ...)' };
  }
  // A key with no value (`tools:`) means "not set", as in Claude Code's files.
  const fields = Object.fromEntries(Object.entries(raw as Record<string, unknown>).filter(([, v]) => v !== null));
  const name = typeof fields.name === 'string' && AGENT_NAME_RE.test(fields.name) ? fields.name : undefined;
  const refuse = (reason: string): ParseResult => (name !== undefined ? { ok: false, reason, name } : { ok: false, reason });

  const result = schemaFor(meta.maxTimeoutMs).safeParse(fields);
  if (!result.success) return refuse(describeIssues(result.error.issues));
  const fm = result.data;

  if (meta.fixedBackend !== undefined && fm.backend !== undefined && fm.backend !== meta.fixedBackend) {
    return refuse(`backend: files in this directory always run with backend ${meta.fixedBackend}; put an agent for another backend in .subagents/agents/`);
  }
  const backend: Backend = meta.fixedBackend ?? fm.backend ?? meta.defaultBackend ?? 'claude';
  if (backend === 'command' && fm.command === undefined) return refuse('command: required for backend command (an argv array)');
  if (backend !== 'command' && fm.command !== undefined) return refuse('command: only allowed with backend command');

  const def: AgentDefinition = {
    name: fm.name,
    description: fm.description,
    backend,
    permissions: fm.permissions ?? 'read-only',
    env: fm.env ?? [],
    delegate: fm.delegate ?? false,
    body: split.body.trim(),
    source: meta.source,
    path: meta.path,
    sha256: createHash('sha256').update(bytes).digest('hex'),
    trusted: meta.trusted,
  };
  if (fm.model !== undefined) def.model = fm.model;
  if (fm.models !== undefined) def.models = fm.models;
  if (fm.tools !== undefined) def.tools = fm.tools;
  if (fm.command !== undefined) def.command = fm.command;
  if (fm.timeoutMs !== undefined) def.timeoutMs = fm.timeoutMs;
  if (fm.isolation === 'worktree') def.isolation = 'worktree';

  if (!meta.trusted) {
    const violation = untrustedViolation(def);
    if (violation) return refuse(violation);
  }
  return { ok: true, def };
}

/**
 * What an untrusted (project) definition may not do, docs/agents.md: an untrusted repository is attacker-controlled, so its
 * files may not run an arbitrary command, pull secrets out of the environment or get write access.
 */
export function untrustedViolation(def: Pick<AgentDefinition, 'backend' | 'env' | 'permissions'>): string | null {
  if (def.backend === 'command') return 'backend: command is not allowed in an untrusted project (it would run a program the repository chose); trust the project with SUBAGENTS_TRUST or SUBAGENTS_ROOTS';
  if (def.env.length > 0) return 'env: not allowed in an untrusted project (it would pass the server\'s variables to the agent); trust the project with SUBAGENTS_TRUST or SUBAGENTS_ROOTS';
  if (def.permissions !== 'read-only') return `permissions: ${def.permissions} is not allowed in an untrusted project, only read-only; trust the project with SUBAGENTS_TRUST or SUBAGENTS_ROOTS`;
  return null;
}

/** The text between a first `---` line and the next `---` line, and what follows it. CRLF files and a BOM are accepted. */
function splitFrontMatter(source: string): { frontMatter: string; body: string } | null {
  const text = source.startsWith('\uFEFF') ? source.slice(1) : source;
  const open = /^---[ \t]*\r?\n/.exec(text);
  if (!open) return null;
  const rest = text.slice(open[0].length);
  // The closing line may be the very first line (empty front matter) or end the file without a newline.
  const close = /^---[ \t]*(?:\r?\n|$)/m.exec(rest);
  if (!close) return null;
  return { frontMatter: rest.slice(0, close.index), body: rest.slice(close.index + close[0].length) };
}

type YamlResult = { ok: true; value: unknown } | { ok: false; reason: string };

function parseFrontMatter(frontMatter: string): YamlResult {
  const first = parseYaml(frontMatter);
  if (first.ok) return first;
  // Claude Code's generated files often carry an unquoted one-line description containing ": " (dialogue examples),
  // which strict YAML rejects. Reading such a line's value as a plain string is what their authors meant; retried only
  // when the strict parse failed, so valid files are never read differently.
  const lenient = quoteColonValues(frontMatter);
  if (lenient !== frontMatter) {
    const second = parseYaml(lenient);
    if (second.ok) return second;
  }
  return first;
}

function parseYaml(text: string): YamlResult {
  // Core schema: plain data only, no custom tags that construct objects; duplicate keys are an error (which one would
  // win is ambiguous); few aliases, so a small file cannot expand into a huge value.
  if (!yaml) throw new Error('the YAML parser is not loaded (await loadYamlParser() first)');
  const doc = yaml.parseDocument(text, { schema: 'core', merge: false, uniqueKeys: true });
  const err = doc.errors[0];
  // yaml's own messages quote the offending line, so only its code and position are reported.
  if (err) return { ok: false, reason: `front matter is not valid YAML (${err.code}${at(err.linePos?.[0])})` };
  // A tag the core schema does not know (`!!js/function`) is only a warning to yaml, which keeps the plain value:
  // refused all the same, since whoever wrote it meant something this file cannot be.
  const tag = doc.warnings.find((w) => w.code === 'TAG_RESOLVE_FAILED');
  if (tag) return { ok: false, reason: `front matter uses a YAML tag the core schema does not have (${tag.code}${at(tag.linePos?.[0])}); plain values only` };
  try {
    return { ok: true, value: doc.toJS({ maxAliasCount: 20 }) };
  } catch {
    return { ok: false, reason: 'front matter is not valid YAML (an alias is undefined or expands too far)' };
  }
}

/** yaml counts lines of the front matter from 1; the file has the opening `---` line before it. */
function at(pos: { line: number; col: number } | undefined): string {
  return pos ? ` at line ${pos.line + 1} of the file, column ${pos.col}` : '';
}

/** Top-level `key: value` lines whose plain value contains ": " get that value double-quoted (comments dropped). */
function quoteColonValues(frontMatter: string): string {
  return frontMatter.split('\n').map((line) => {
    const m = /^([A-Za-z_][A-Za-z0-9_-]*):[ \t]+(.*?)(\r?)$/.exec(line);
    if (!m) return line;
    const [, key, value, cr] = m as unknown as [string, string, string, string];
    // Only a plain scalar can be misread this way; quoted, flow, block, anchored or tagged values are left alone.
    if (!value.includes(': ') || /^["'[{|>&*!#%@`]/.test(value)) return line;
    const withoutComment = value.replace(/[ \t]+#.*$/, '').trimEnd();
    return `${key}: ${JSON.stringify(withoutComment)}${cr}`;
  }).join('\n');
}

const modelSchema = z.string({ error: 'must be a string' })
  .regex(MODEL_RE, { error: 'must be a model id of letters, digits and . _ : / @ + [ ] - (not starting with -), at most 128 characters' });

const toolNameSchema = z.string({ error: 'each tool must be a string' }).trim()
  .min(1, { error: 'a tool name is empty' })
  .max(256, { error: 'a tool name is over 256 characters' })
  // Tool names reach CLI flags and config files: control characters there could split a line or an argument.
  .refine((t) => !/[\u0000-\u001f\u007f]/.test(t), { error: 'a tool name contains a control character' });

const toolsSchema = z.union([
  z.array(toolNameSchema, { error: 'must be a list of tool names or a comma-separated string' }),
  z.string().transform((s) => splitToolList(s)).pipe(z.array(toolNameSchema)),
], { error: 'must be a list of tool names or a comma-separated string' });

const envNameSchema = z.string({ error: 'each entry must be a variable name' })
  .regex(ENV_NAME_RE, { error: 'each entry must be a variable name (letters, digits, _; not starting with a digit)' })
  .superRefine((name, ctx) => {
    // Variables that make a program load code chosen by whoever sets them: never passed, so never accepted here.
    if (isNeverPass(name)) ctx.addIssue({ code: 'custom', message: `${name} is never passed to an agent (it can make the agent's process load or run other code)` });
    // The runner alone sets the nesting variables; a file naming them could forge a budget or escape the tree.
    else if (isNestingName(name)) ctx.addIssue({ code: 'custom', message: `${name} is reserved: SUBAGENTS_* variables are set by the runner itself` });
  });

const schemas = new Map<number, ReturnType<typeof frontMatterSchema>>();

/** Built once per limit: building a zod object costs more than parsing a file with it (every launch reads the catalog). */
function schemaFor(maxTimeoutMs: number): ReturnType<typeof frontMatterSchema> {
  let s = schemas.get(maxTimeoutMs);
  if (!s) {
    s = frontMatterSchema(maxTimeoutMs);
    schemas.set(maxTimeoutMs, s);
  }
  return s;
}

function frontMatterSchema(maxTimeoutMs: number) {
  return z.object({
    name: z.string({ error: 'required, a string (quote it if it looks like a number)' })
      .regex(AGENT_NAME_RE, { error: 'must match ^[a-z0-9][a-z0-9._-]{0,63}$ (lowercase letters, digits, . _ -; at most 64 characters)' }),
    description: z.string({ error: 'required, a string' }).trim().min(1, { error: 'must not be empty' }),
    backend: z.enum(BACKENDS, { error: `must be one of ${BACKENDS.join(', ')}` }).optional(),
    model: modelSchema.optional(),
    models: z.array(modelSchema, { error: 'must be a list of model ids' })
      .min(1, { error: 'must list at least one model' }).max(32, { error: 'at most 32 models' }).optional(),
    tools: toolsSchema.optional(),
    permissions: z.enum(PERMISSIONS, { error: `must be one of ${PERMISSIONS.join(', ')}` }).optional(),
    command: z.array(
      z.string({ error: 'each argument must be a string' }).min(1, { error: 'arguments must not be empty' })
        // NUL cannot be passed in an argv entry; refused here rather than failing at spawn.
        .refine((a) => !a.includes('\u0000'), { error: 'an argument contains a NUL character' }),
      { error: 'must be an argv array of strings, e.g. ["node", "${agentDir}/agent.js"]' },
    ).min(1, { error: 'must name at least the program' }).optional(),
    env: z.array(envNameSchema, { error: 'must be a list of variable names' }).max(128, { error: 'at most 128 names' }).optional(),
    timeoutMs: z.number({ error: 'must be a number of milliseconds' })
      .int({ error: 'must be a whole number of milliseconds' })
      .positive({ error: 'must be positive' })
      .max(maxTimeoutMs, { error: `must be at most ${maxTimeoutMs} (SUBAGENTS_MAX_TIMEOUT_MS)` }).optional(),
    delegate: z.boolean({ error: 'must be true or false' }).optional(),
    isolation: z.enum(['worktree', 'none'], { error: 'must be worktree or none' }).optional(),
  });
}

/** "key: why" for each issue (at most three), from the issue path and our own messages: never from the values. */
function describeIssues(issues: ReadonlyArray<{ path: PropertyKey[]; message: string }>): string {
  const parts = issues.slice(0, 3).map((i) => {
    const [key, index] = i.path;
    const where = typeof index === 'number' ? `${String(key)}[${index}]` : String(key ?? 'front matter');
    return `${where}: ${i.message}`;
  });
  if (issues.length > 3) parts.push(`and ${issues.length - 3} more`);
  return parts.join('; ');
}

/** Splits `Read, Grep, Bash(git diff:*, git log:*)` on the commas outside parentheses. */
export function splitToolList(s: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of s) {
    if (ch === '(') depth++;
    else if (ch === ')') depth = Math.max(0, depth - 1);
    if (ch === ',' && depth === 0) { out.push(current); current = ''; continue; }
    current += ch;
  }
  out.push(current);
  return out.map((t) => t.trim()).filter((t) => t.length > 0);
}
