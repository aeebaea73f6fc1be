import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { privateTestDir } from '../helpers/private-dir.js';
import { ok } from '../helpers/runs.js';
import { startServer, waitTerminal, type Started } from '../helpers/server.js';
import { writeAgent } from '../helpers/state-home.js';

/**
 * A CLI that says why it failed only on stderr (gemini without auth exits 41, pi without a key exits 1, both with
 * nothing on stdout): the step error carries stderr's last non-empty line, bounded and redacted, through the real
 * server, runner and adapters.
 */

const CLI = path.join(FIXTURE_AGENTS, 'stderr-cli.mjs');
const KEY = 'sk-ant-api03-FAKEfakeFAKEfake0123456789';
const GEMINI_REASON = 'Please set an Auth method in your settings.json or specify one of the following environment variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA';

describe('step errors take the reason from stderr when the CLI gave none on stdout', () => {
  let base: string;
  let s: Started;
  /** A wrapper standing in for a CLI binary: it ignores the adapter's argv and fails with these stderr lines. */
  const fakeCli = (name: string, code: number, lines: string[]) => {
    const file = path.join(base, 'bin', name);
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    const quoted = [process.execPath, CLI, String(code), ...lines].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
    fs.writeFileSync(file, `#!/bin/sh\nexec ${quoted}\n`, { mode: 0o700 });
    return file;
  };

  beforeAll(async () => {
    // Gemini's adapter refuses a state home below a group/world-writable directory (the OS temp dir is one).
    base = fs.realpathSync(fs.mkdtempSync(path.join(privateTestDir('stderr-reason'), 'run-')));
    const home = path.join(base, 'home');
    const root = path.join(base, 'work');
    fs.mkdirSync(home, { mode: 0o700 });
    fs.mkdirSync(root, { mode: 0o700 });
    const agents = path.join(home, 'agents');
    writeAgent(agents, 'gem', { backend: 'gemini' });
    writeAgent(agents, 'pi-agent', { backend: 'pi' });
    writeAgent(agents, 'long', { backend: 'command', command: ['node', CLI, '3', 'first line', `Error: ${'x'.repeat(1000)}`] });
    writeAgent(agents, 'silent', { backend: 'command', command: ['node', CLI, '3'] });
    // More stderr than the runner stores (1 MiB), then the reason: the end is what is kept for the tail.
    writeAgent(agents, 'chatty', { backend: 'command', command: ['sh', '-c', 'head -c 2200000 /dev/zero | tr "\\0" e >&2; echo >&2; echo "the real reason: disk quota" >&2; exit 1'] });
    s = await startServer({
      SUBAGENTS_HOME: home, SUBAGENTS_ROOTS: root,
      SUBAGENTS_BIN_GEMINI: fakeCli('gemini', 41, ['Loaded cached credentials.', GEMINI_REASON]),
      SUBAGENTS_BIN_PI: fakeCli('pi', 1, ['pi: starting', `Error: No API key found for anthropic (token=${KEY}). Set ANTHROPIC_API_KEY.`]),
    });
  });
  afterAll(async () => {
    await s?.close();
    fs.rmSync(base, { recursive: true, force: true });
  });

  const failedStep = async (agent: string) => {
    const l = await ok(s, 'launch', { agent, task: 'do it' });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    return fin.steps[0] as { error: { code: string; message: string; detail?: string }; exitCode: number; stderrTail?: string };
  };

  it('gemini without auth (exit 41): the generic reason gains its stderr reason, in the detail (the message is listed)', async () => {
    const step = await failedStep('gem');
    expect(step.exitCode).toBe(41);
    expect(step.error.code).toBe('STEP_FAILED');
    expect(step.error.message).toBe('agent gem reported an error (exited with code 41)');
    expect(step.error.detail).toBe(`gemini ended without a result (exit 41); stderr: ${GEMINI_REASON}`);
  });

  it('pi without a key (exit 1): the reason is redacted in the error and in stderrTail', async () => {
    const step = await failedStep('pi-agent');
    expect(step.error.message).toBe('agent pi-agent reported an error (exited with code 1)');
    expect(step.error.detail).toBe('pi ended without an answer (exit 1); stderr: Error: No API key found for anthropic (token=[redacted] Set ANTHROPIC_API_KEY.');
    expect(step.stderrTail).toContain('pi: starting');
    expect(step.stderrTail).toContain('token=[redacted]');
    expect(step.stderrTail).not.toContain(KEY);
  });

  it('a command agent: its last non-empty stderr line, bounded to 200 characters; nothing added when stderr is empty', async () => {
    const long = await failedStep('long');
    expect(long.error.message).toBe('agent long exited with code 3');
    expect(long.error.detail).toBe(`stderr: Error: ${'x'.repeat(192)}…`);
    const silent = await failedStep('silent');
    expect(silent.error.message).toBe('agent silent exited with code 3');
    expect(silent.error.detail).toBeUndefined();
  });

  it('a CLI that logged more than the stored stderr before it failed: the tail and the reason are its last lines', async () => {
    const step = await failedStep('chatty');
    expect(step.error.detail).toBe('stderr: the real reason: disk quota');
    expect(step.stderrTail).toMatch(/e\nthe real reason: disk quota\n$/);
  });
});
