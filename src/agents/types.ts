/** Backends an agent file may name (docs/agents.md). */
export const BACKENDS = ['claude', 'codex', 'gemini', 'pi', 'opencode', 'command'] as const;
export type Backend = (typeof BACKENDS)[number];

export const PERMISSIONS = ['read-only', 'edit', 'full'] as const;
export type Permission = (typeof PERMISSIONS)[number];

/** Where a definition came from. */
export type AgentSource = 'operator' | 'home' | 'bundled' | 'project';

/** A parsed, validated agent definition (the Markdown file's front matter and body). */
export interface AgentDefinition {
  name: string;
  description: string;
  backend: Backend;
  model?: string;
  models?: string[];
  tools?: string[];
  permissions: Permission;
  command?: string[];
  env: string[];
  timeoutMs?: number;
  delegate: boolean;
  /** `worktree`: each step of this agent runs in its own git worktree and branch (docs/agents.md). */
  isolation?: 'worktree';
  /** The system prompt: appended to the CLI's own. */
  body: string;
  source: AgentSource;
  /** Absolute path of the file it was read from. */
  path: string;
  /** sha256 of the file's bytes: the run freezes this. */
  sha256: string;
  trusted: boolean;
}

/** A definition as frozen into a run when a step is accepted; a later edit of the file changes nothing. */
export interface FrozenAgent extends AgentDefinition {
  /** Absolute path of the backend's executable, resolved at launch. */
  bin: string;
}

/** What an adapter needs to build one agent process. */
export interface InvocationContext {
  agent: FrozenAgent;
  /** The model a launch picked (one of `models`), else the file's `model`; `inherit` or undefined: the CLI's default. */
  model?: string;
  /** 0600 file holding the body (the system prompt). */
  systemPromptFile: string;
  /** 0600 file holding the task, for CLIs that cannot read stdin. */
  taskFile: string;
  /** Set when `delegate: true`: the command that starts this server, to inject into the CLI's MCP config. */
  delegateServer?: { command: string; args: string[]; env: Record<string, string> };
  /** A private directory of the step where the adapter may write config files it names on argv. */
  scratchDir: string;
}

export interface Invocation {
  /** argv[0] is the executable; never run through a shell. */
  argv: string[];
  /** `stdin`: the task is written to the process's stdin; `file`: the task is in taskFile, named on argv. */
  taskVia: 'stdin' | 'file';
  /** Extra variables the adapter sets (config locations, never secrets). */
  env?: Record<string, string>;
  /** Files the adapter needs written before the start (0600), e.g. an MCP config. */
  files?: Array<{ path: string; content: string }>;
}

export interface Usage {
  inputTokens?: number;
  outputTokens?: number;
  cacheReadTokens?: number;
  cacheWriteTokens?: number;
}

/** What an adapter made of a finished process's stdout. */
export interface ParsedResult {
  /** The final text the agent answered with. */
  text: string;
  /** The CLI reported an error result (e.g. not logged in): the step fails even on exit 0. */
  isError: boolean;
  /** The CLI's own reason, short and without secrets, when isError. */
  errorMessage?: string;
  /** errorMessage is the adapter's generic fallback (the CLI gave no reason on stdout): the runner adds stderr's last line. */
  reasonUnknown?: boolean;
  usage?: Usage;
  costUsd?: number;
}

/** Streams stdout lines in, gives the result at the end. Must hold bounded memory whatever the output size. */
export interface OutputParser {
  onLine(line: string): void;
  finish(exitCode: number | null): ParsedResult;
}

export interface BackendAdapter {
  backend: Backend;
  /** The executable looked up on PATH (SUBAGENTS_BIN_<BACKEND> overrides it). */
  binName: string;
  /** Credential and config variables this CLI reads, passed through when set (documented list). */
  credentialEnv: string[];
  /** Whether the CLI can be given this server as an MCP server (delegate: true). */
  supportsDelegate: boolean;
  buildInvocation(ctx: InvocationContext): Invocation;
  /** Why this CLI cannot run the definition as written (checked at load and launch: AGENT_UNAVAILABLE), else null. */
  unsupported?(agent: AgentDefinition): string | null;
  /** Absent for `command`: its stdout is the output verbatim. */
  createParser?(): OutputParser;
  /** argv (after the binary) that prints the version. */
  versionArgs: string[];
}
