import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome } from '../helpers/state-home.js';
import { cli } from './helpers.js';

describe('demo', { timeout: 180_000 }, () => {
  let t: ReturnType<typeof tempStateHome>;
  beforeAll(() => { t = tempStateHome('sa-demo-'); });
  afterAll(() => t.cleanup());

  it('runs a real MCP session with the bundled agent, printing plain progress lines when not on a terminal', async () => {
    const r = await cli(['demo'], { SUBAGENTS_HOME: t.home }, { timeoutMs: 60_000 });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('agents: demo-summarizer');
    expect(r.stdout).toMatch(/launched r-\S+ \(session s-\S+\)/);
    expect(r.stdout).not.toContain('\r'); // no in-place redraws in a pipe
    expect(r.stdout).toMatch(/^ {2}completed, step completed after /m);
    expect(r.stdout).toContain('# Report from demo-summarizer');
    const runId = /launched (r-\S+)/.exec(r.stdout)![1]!;
    const runs = JSON.parse((await cli(['runs', '--json'], { SUBAGENTS_HOME: t.home })).stdout);
    expect(runs.runs).toHaveLength(1);
    expect(runs.runs[0]).toMatchObject({ runId, state: 'completed', label: 'demo', agents: ['demo-summarizer'] });
  });
});
