/**
 * What the runner carries for its agents: a chain's runner can serve an appended step of any agent (its credential
 * and named variables), and NODE_EXTRA_CA_CERTS reaches the agents without the runner itself loading a CA bundle.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { ok } from '../helpers/runs.js';
import { startServer, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

describe('the runner environment', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome('sa-renv-');
    const dir = path.join(t.home, 'agents');
    writeAgent(dir, 'gate', { backend: 'command', command: ['node', FAKE, 'gate', path.join(t.base, 'open')] });
    writeAgent(dir, 'env-reader', { backend: 'command', command: ['node', FAKE, 'env'], env: ['ONLY_FOR_APPENDED'] });
    fs.writeFileSync(path.join(t.base, 'ca.pem'), 'not really a certificate\n');
    s = await startServer({
      SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, ONLY_FOR_APPENDED: 'appended-value',
      NODE_EXTRA_CA_CERTS: path.join(t.base, 'ca.pem'),
    });
  });
  afterAll(async () => {
    await s?.close();
    t?.cleanup();
  });

  it('an appended step gets its own variables; agents get NODE_EXTRA_CA_CERTS, the runner does not load it', async () => {
    const l = await ok(s, 'launch', { chain: [{ agent: 'gate', task: 'first' }] });
    const runDir = path.join(t.home, 'runs', l.runId);
    const status = JSON.parse(fs.readFileSync(path.join(runDir, 'status.json'), 'utf8'));
    const runnerEnv = fs.readFileSync(`/proc/${status.runner.pid}/environ`, 'latin1').split('\0');
    expect(runnerEnv.some((e) => e.startsWith('NODE_EXTRA_CA_CERTS='))).toBe(false);
    expect(runnerEnv).toContain('ONLY_FOR_APPENDED=appended-value');
    await ok(s, 'append', { runId: l.runId, step: { agent: 'env-reader', task: 'x' } });
    fs.writeFileSync(path.join(t.base, 'open'), '');
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    const seen = JSON.parse(fs.readFileSync(path.join(runDir, 'out', '1.txt'), 'utf8')).env;
    expect(seen.ONLY_FOR_APPENDED).toBe('appended-value');
    expect(seen.NODE_EXTRA_CA_CERTS).toBe(path.join(t.base, 'ca.pem'));
    expect(Object.keys(seen).filter((k) => k.startsWith('SUBAGENTS_DEFERRED'))).toEqual([]);
  });
});
