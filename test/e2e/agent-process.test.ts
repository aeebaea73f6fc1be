/**
 * What a `command` agent is started with, seen from inside the agent: the default step limit, the user's umask (the
 * server and runner run under 077) and its system prompt file. Real server, real runner, the fake agent.
 */
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ok } from '../helpers/runs.js';
import { startServer, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { FAKE, stillRunning, identityOf } from './support.js';

describe('the agent process', () => {
  let t: ReturnType<typeof tempStateHome>;
  const servers: Started[] = [];
  const start = async (env: Record<string, string>, o: { umask?: string } = {}) => {
    const s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300', ...env }, o);
    servers.push(s);
    return s;
  };
  afterEach(async () => {
    for (const s of servers.splice(0)) await s.close();
    t?.cleanup();
  });

  it('a step given no limit gets SUBAGENTS_DEFAULT_TIMEOUT_MS: a sleeping agent is stopped and the step fails TIMEOUT', async () => {
    t = tempStateHome('sa-agentproc-');
    // No timeout in the agent file or the launch: only the server's default applies.
    writeAgent(path.join(t.home, 'agents'), 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    const s = await start({ SUBAGENTS_DEFAULT_TIMEOUT_MS: '1000' });
    const l = await ok(s, 'launch', { agent: 'sleeper', task: 'sleep past the default' });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('TIMEOUT');
    expect(fin.error.message).toContain('1000 ms');
    expect(fin.steps[0]).toMatchObject({ state: 'failed', signal: 'SIGTERM', error: { code: 'TIMEOUT' } });
    expect(fin.steps[0].pid).toBeTypeOf('number');
    const agent = identityOf(fin.steps[0].pid);
    expect(agent === null || !stillRunning(agent)).toBe(true);
  });

  it('the agent runs under the umask the server was started with, not the runner\'s 077', async () => {
    t = tempStateHome('sa-agentproc-');
    writeAgent(path.join(t.home, 'agents'), 'env-reader', { backend: 'command', command: ['node', FAKE, 'env'] });
    // 027: neither the runner's 077 nor the common default 022, so only a handed-on umask can produce it.
    const s = await start({}, { umask: '027' });
    const l = await ok(s, 'launch', { agent: 'env-reader', task: 'report' });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    const seen = JSON.parse(fin.output.text);
    expect(seen.umask.toString(8)).toBe('27');
  });

  it('the command backend hands the agent its system prompt file: SUBAGENTS_SYSTEM_PROMPT_FILE, 0600, the agent file\'s body', async () => {
    t = tempStateHome('sa-agentproc-');
    const body = 'You are the prompt-reader.\nSecond line of the system prompt, with "quotes" and ünïcode.';
    writeAgent(path.join(t.home, 'agents'), 'prompt-reader', { backend: 'command', command: ['node', FAKE, 'prompt'] }, body);
    // Under the user's umask 022 too: the prompt file is the runner's, so it stays 0600 whatever the agent's umask.
    const s = await start({}, { umask: '022' });
    const l = await ok(s, 'launch', { agent: 'prompt-reader', task: 'read your prompt' });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    const seen = JSON.parse(fin.output.text);
    expect(path.isAbsolute(seen.file)).toBe(true);
    expect(seen.file.startsWith(path.join(t.home, 'runs', l.runId) + path.sep)).toBe(true);
    expect(seen.mode).toBe(0o600);
    expect(seen.body.trim()).toBe(body);
  });
});
