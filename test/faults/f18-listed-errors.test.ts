/**
 * F18 — agent output in listings. A failed run's error message used to carry what the agent said: its stderr's last
 * line (`agent leak exited with code 3; stderr: …`), the answer text of a CLI result marked `is_error`, and — through
 * `{previous}` — a previous step's output; a group's error embedded its first member's message. Listings (status
 * list mode, restore's summaries, the CLI's `runs`) showed it.
 * Expect: every listed error is built from codes, names and numbers only; the agent's words stay in the run's full
 * status (`status {runId}`: `error.detail`, the step's `stderrTail`) and its files.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { cli } from '../cli/helpers.js';
import { FAKE_AGENT, FIXTURE_BIN, pathWith } from '../backends/helpers.js';
import { launchOk } from './fault-helpers.js';

const WORDS = 'PRIVATE-WORDS-7f3a'; // printed by step 0, passed on through {previous}
const GROUP = 'PRIVATE-GROUP-91c2'; // a group member's stderr
const ANSWER = 'PRIVATE-ANSWER-44d0'; // a CLI result with is_error: its answer text

describe('F18 agent output never reaches a listed error', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let other: Started;
  let env: Record<string, string>;
  beforeAll(async () => {
    t = tempStateHome();
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'words', { backend: 'command', command: ['sh', '-c', `echo ${WORDS}`] });
    writeAgent(agents, 'leak', { backend: 'command', command: ['sh', '-c', 'cat >&2; exit 3'] });
    writeAgent(agents, 'echo', { backend: 'command', command: ['node', FAKE_AGENT, 'echo'] });
    writeAgent(agents, 'claude', { backend: 'claude' });
    const claudeDir = path.join(t.base, 'claude');
    fs.mkdirSync(claudeDir, { mode: 0o700 });
    env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, PATH: pathWith(FIXTURE_BIN), CLAUDE_CONFIG_DIR: claudeDir, ANTHROPIC_API_KEY: 'sk-ant-fake-0000000000' };
    s = await startServer(env);
    other = await startServer(env);
  });
  afterAll(async () => {
    await s.close();
    await other.close();
    t.cleanup();
  });

  it('status list mode, restore and `runs` carry codes, names and numbers; the full status keeps the words', async () => {
    const chain = await launchOk(s, { chain: [{ agent: 'words', task: 'go' }, { agent: 'leak', task: 'said: {previous}' }] });
    const group = await launchOk(s, { tasks: [{ agent: 'leak', task: GROUP }, { agent: 'echo', task: 'fine' }] });
    const answer = await launchOk(s, { agent: 'claude', task: JSON.stringify({ reply: ANSWER, isError: true, exitCode: 1 }) });
    const fins = { chain: await waitTerminal(s, chain), group: await waitTerminal(s, group), answer: await waitTerminal(s, answer) };
    for (const f of Object.values(fins)) {
      expect(f.state).toBe('failed');
      expect(f.error.code).toBe('STEP_FAILED');
    }
    expect(fins.chain.error.message).toBe('agent leak exited with code 3');
    expect(fins.group.error.message).toBe('step 0 (parallel): 1 of 2 members failed; first: member 0 (agent leak) STEP_FAILED');
    expect(fins.answer.error.message).toBe('agent claude reported an error (exited with code 1)');
    // The full status of each run still says what the agent said.
    expect(fins.chain.error.detail).toContain(WORDS);
    expect(fins.chain.steps[1].stderrTail).toContain(WORDS);
    expect(fins.answer.error.detail).toContain(ANSWER);
    expect(JSON.stringify(fins.group)).toContain(GROUP);

    const secrets = [WORDS, GROUP, ANSWER];
    const clean = (what: string, text: string) => { for (const x of secrets) expect(text, `${what} carries ${x}`).not.toContain(x); };

    const list = await s.call('status', {});
    expect(list.isError, textOf(list)).toBeFalsy();
    expect((sc(list).runs as unknown[]).length).toBe(3);
    clean('status list mode', JSON.stringify(list));

    const sessionId = sc(list).sessionId as string;
    const restored = await other.call('restore', { lineage: [sessionId] });
    expect(restored.isError, textOf(restored)).toBeFalsy();
    expect(sc(restored).runs.length).toBe(3);
    clean('restore', JSON.stringify(restored));

    const runs = await cli(['runs', '--json'], env, { timeoutMs: 30_000 });
    expect(runs.code, runs.stderr).toBe(0);
    expect(runs.stdout).toContain(chain);
    clean('runs --json', runs.stdout);
    const table = await cli(['runs'], env, { timeoutMs: 30_000 });
    clean('runs', table.stdout);
  }, 120_000);
});
