import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { FAKE_CLAUDE, FIXTURE_BIN, callFor, flag, pathWith } from './helpers.js';

/**
 * The claude backend end to end through a fake `claude` (test/fixtures/bin/claude) that parses argv like Claude Code
 * 2.1.197 and prints its stream-json protocol: launch → runner → adapter argv → CLI → parser → status.
 */

const API_KEY = 'sk-ant-api03-FAKEfakeFAKEfake0123456789';
const SERVER_SECRET = 'SENTINEL-server-only-4b1d';

describe('claude backend through a fake claude CLI', () => {
  let t: ReturnType<typeof tempStateHome>;
  let claudeDir: string;
  const servers: Started[] = [];
  const start = async (env: Record<string, string>, o: { cwd?: string } = {}) => {
    const s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300', CLAUDE_CONFIG_DIR: claudeDir, ...env }, o);
    servers.push(s);
    return s;
  };

  beforeAll(() => {
    t = tempStateHome('sa-claude-');
    claudeDir = path.join(t.base, 'claude-config');
    fs.mkdirSync(claudeDir, { mode: 0o700 });
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'writer', { backend: 'claude', model: 'sonnet', permissions: 'edit' }, 'You write careful unit tests.');
    writeAgent(agents, 'reader', { backend: 'claude' }, 'You only read.');
  });
  afterAll(async () => {
    for (const s of servers.splice(0)) await s.close();
    t.cleanup();
  });

  it('found on PATH: final text, usage and cost in status; argv, stdin, system prompt file and environment as the adapter builds them', async () => {
    const s = await start({ PATH: pathWith(FIXTURE_BIN), ANTHROPIC_API_KEY: API_KEY, SERVER_ONLY_SECRET: SERVER_SECRET });
    const task = '--help me write a test for parse() [m1]';
    const l = await s.call('launch', { agent: 'writer', task });
    expect(l.isError, textOf(l)).toBeFalsy();
    const fin = await waitTerminal(s, sc(l).runId);
    expect(fin.state).toBe('completed');
    expect(fin.error).toBeNull();
    expect(fin.output.text).toBe(`fake claude heard: ${task}`);
    const step = fin.steps[0];
    expect(step).toMatchObject({ state: 'completed', exitCode: 0, costUsd: 0.000249 });
    expect(step.usage).toEqual({ inputTokens: 12, outputTokens: 7, cacheReadTokens: 3, cacheWriteTokens: 2 });
    expect(step.output.text).toBe(`fake claude heard: ${task}`);

    const call = callFor(claudeDir, '[m1]');
    // The task arrived on stdin, whole — never on argv, so a task starting with `--` is not a flag.
    expect(call.task).toBe(task);
    expect(call.argv.join('\n')).not.toContain('parse()');
    expect(call.argv.slice(0, 3)).toEqual(['-p', '--output-format=stream-json', '--verbose']);
    expect(flag(call.argv, '--permission-mode')).toBe('acceptEdits');
    expect(flag(call.argv, '--model')).toBe('sonnet');
    expect(flag(call.argv, '--tools')).toBeUndefined();
    expect(flag(call.argv, '--mcp-config')).toBeUndefined();
    // The body through the CLI's own mechanism: a 0600 file appended to Claude's system prompt.
    expect(call.systemPrompt?.trim()).toBe('You write careful unit tests.');
    expect(call.systemPromptMode).toBe('600');
    expect(flag(call.argv, '--append-system-prompt-file')).toMatch(new RegExp(`^${t.home}/`));
    expect(call.cwd).toBe(t.root);
    // Its credentials and config location reach it; the server's other variables do not.
    expect(call.envNames).toEqual(expect.arrayContaining(['ANTHROPIC_API_KEY', 'CLAUDE_CONFIG_DIR', 'HOME', 'PATH', 'SUBAGENTS_SYSTEM_PROMPT_FILE']));
    expect(call.envNames).not.toContain('SERVER_ONLY_SECRET');

    // agents: available, and the backend reported found with its path and version.
    let a = sc(await s.call('agents'));
    expect(a.agents.find((x: any) => x.name === 'writer')).toMatchObject({ backend: 'claude', available: true });
    // Each call waits for `--version` at most ~1.5 s; a loaded machine may need a second call to see it.
    for (let i = 0; i < 10 && !a.backends.find((b: any) => b.backend === 'claude').version; i++) a = sc(await s.call('agents'));
    expect(a.backends.find((b: any) => b.backend === 'claude')).toEqual({ backend: 'claude', found: true, path: FAKE_CLAUDE, version: '2.1.197 (Claude Code)' });
    // Neither the key nor the server's secret shows anywhere the server speaks.
    for (const secret of [API_KEY, SERVER_SECRET]) {
      expect(JSON.stringify(fin)).not.toContain(secret);
      expect(JSON.stringify(a)).not.toContain(secret);
      expect(s.stderr()).not.toContain(secret);
    }
  });

  it('an error result fails the step with the CLI\'s own reason: not logged in (exit 1), and is_error on exit 0, secrets redacted', async () => {
    // No credential at all: the recorded "Not logged in" stream, exit 1.
    const anon = await start({ PATH: pathWith(FIXTURE_BIN) });
    const l1 = await anon.call('launch', { agent: 'reader', task: 'anyone there? [m2]' });
    expect(l1.isError, textOf(l1)).toBeFalsy();
    const f1 = await waitTerminal(anon, sc(l1).runId);
    expect(f1.state).toBe('failed');
    expect(f1.steps[0]).toMatchObject({ state: 'failed', exitCode: 1 });
    expect(f1.error.code).toBe('STEP_FAILED');
    expect(f1.error.detail).toContain('Not logged in · Please run /login');
    expect(f1.steps[0].error.detail).toContain('Not logged in · Please run /login');

    // Logged in, but the CLI ends with an error result while exiting 0: still a failure, with its reason.
    const s = await start({ PATH: pathWith(FIXTURE_BIN), ANTHROPIC_API_KEY: API_KEY });
    const plan = { reply: 'API Error: 401 {"type":"error","error":{"message":"invalid x-api-key sk-ant-api03-LEAKEDleakedLEAKED99"}} [m3]', isError: true, exitCode: 0 };
    const l2 = await s.call('launch', { agent: 'reader', task: JSON.stringify(plan) });
    const f2 = await waitTerminal(s, sc(l2).runId);
    expect(f2.state).toBe('failed');
    expect(f2.steps[0]).toMatchObject({ state: 'failed', exitCode: 0, costUsd: 0.000249 });
    expect(f2.error.code).toBe('STEP_FAILED');
    expect(f2.error.message).toBe('agent reader reported an error (exited with code 0)');
    expect(f2.error.detail).toMatch(/^API Error: 401 .*invalid x-api-key \[redacted\]/);
    expect(JSON.stringify(f2.error)).not.toContain('LEAKED');
  });

  it('CLI missing: agents says unavailable and why, launch answers AGENT_UNAVAILABLE; SUBAGENTS_BIN_CLAUDE finds it off PATH', async () => {
    const missing = await start({ PATH: pathWith(), ANTHROPIC_API_KEY: API_KEY });
    const a = sc(await missing.call('agents'));
    const writer = a.agents.find((x: any) => x.name === 'writer');
    expect(writer).toMatchObject({ available: false, backend: 'claude' });
    expect(writer.problem).toMatch(/claude CLI was not found on PATH; .*SUBAGENTS_BIN_CLAUDE/);
    expect(a.backends.find((b: any) => b.backend === 'claude')).toMatchObject({ found: false, problem: expect.stringMatching(/claude not found on PATH/) });
    const l = await missing.call('launch', { agent: 'writer', task: 'x' });
    expect(l.isError).toBe(true);
    expect(l.structuredContent).toBeUndefined();
    expect(textOf(l)).toMatch(/^AGENT_UNAVAILABLE: agent writer \(backend claude\) cannot run here: the claude CLI was not found on PATH/);

    // A wrong override is reported as such (never a silent fallback to PATH).
    const wrong = await start({ PATH: pathWith(FIXTURE_BIN), SUBAGENTS_BIN_CLAUDE: path.join(t.base, 'no', 'claude') });
    const w = await wrong.call('launch', { agent: 'writer', task: 'x' });
    expect(textOf(w)).toMatch(/^AGENT_UNAVAILABLE: .*SUBAGENTS_BIN_CLAUDE does not name an executable file/);

    // The override alone (a GUI client's minimal PATH) runs it.
    const byVar = await start({ PATH: pathWith(), SUBAGENTS_BIN_CLAUDE: FAKE_CLAUDE, ANTHROPIC_API_KEY: API_KEY });
    const ok = await byVar.call('launch', { agent: 'writer', task: 'via the override [m4]' });
    expect(ok.isError, textOf(ok)).toBeFalsy();
    const fin = await waitTerminal(byVar, sc(ok).runId);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('fake claude heard: via the override [m4]');
  });

  it('Claude Code\'s own .claude/agents files in a trusted project run unchanged: comma tools, model and body', async () => {
    const project = path.join(t.root, 'proj');
    const dir = path.join(project, '.claude', 'agents');
    fs.mkdirSync(dir, { recursive: true });
    // Exactly as Claude Code writes them (`/agents`): comma string of tools, a model alias, a key this server does not know.
    fs.writeFileSync(path.join(dir, 'code-reviewer.md'), [
      '---',
      'name: code-reviewer',
      'description: Expert code review specialist. Proactively reviews code for quality, security, and maintainability.',
      'tools: Read, Grep, Glob, Bash',
      'model: opus',
      'color: blue',
      '---',
      '',
      'You are a senior code reviewer ensuring high standards of code quality and security.',
      '',
      'When invoked:',
      '1. Run git diff to see recent changes',
      '2. Focus on modified files',
      '',
    ].join('\n'));
    fs.writeFileSync(path.join(dir, 'doc-writer.md'), '---\nname: doc-writer\ndescription: Writes docs\nmodel: inherit\n---\nYou write documentation.\n');
    // The project is inside an explicitly configured root: its definitions are trusted.
    const s = await start({ PATH: pathWith(FIXTURE_BIN), ANTHROPIC_API_KEY: API_KEY }, { cwd: project });
    const a = sc(await s.call('agents'));
    expect(a.agents.find((x: any) => x.name === 'code-reviewer')).toMatchObject({ backend: 'claude', source: 'project', trusted: true, available: true });
    expect(a.refused).toEqual([]);

    const l = await s.call('launch', { tasks: [{ agent: 'code-reviewer', task: 'review the diff [m5]' }, { agent: 'doc-writer', task: 'document it [m6]' }] });
    expect(l.isError, textOf(l)).toBeFalsy();
    const fin = await waitTerminal(s, sc(l).runId);
    expect(fin.state).toBe('completed');

    const review = callFor(claudeDir, '[m5]');
    // Default permissions are read-only: the tool list restricts, and read-only narrows it further (Bash dropped,
    // write tools denied outright); the model alias is passed as written.
    expect(flag(review.argv, '--tools')).toBe('Read,Grep,Glob');
    expect(flag(review.argv, '--model')).toBe('opus');
    expect(flag(review.argv, '--permission-mode')).toBe('dontAsk');
    expect(flag(review.argv, '--disallowedTools')).toBe('Bash,Edit,Write,NotebookEdit');
    expect(review.argv).toContain('--strict-mcp-config');
    expect(review.systemPrompt).toContain('You are a senior code reviewer ensuring high standards');
    expect(review.systemPrompt).toContain('2. Focus on modified files');
    expect(review.systemPrompt).not.toContain('color: blue');

    const doc = callFor(claudeDir, '[m6]');
    // `model: inherit` → Claude's own default; no tools → the read-only set.
    expect(flag(doc.argv, '--model')).toBeUndefined();
    expect(flag(doc.argv, '--tools')).toBe('Read,Grep,Glob,WebFetch,WebSearch');
    expect(doc.systemPrompt?.trim()).toBe('You write documentation.');
  });
});
