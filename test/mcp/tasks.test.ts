import fs from 'node:fs';
import path from 'node:path';
import { CallToolResultSchema, CreateTaskResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pidsMentioning, until } from '../e2e/support.js';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { sc, startServer, textOf, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

/**
 * MCP Tasks (protocol 2025-11-25) through the SDK client's own task API: a task-augmented launch is the run (task id =
 * run id), tasks/get, tasks/result, tasks/list and tasks/cancel read and steer it, and a plain launch is unchanged.
 */
describe('MCP Tasks over runs', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let gate: string;
  beforeAll(async () => {
    t = tempStateHome();
    const fake = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
    gate = path.join(t.base, 'gate');
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', fake, 'echo'] });
    writeAgent(path.join(t.home, 'agents'), 'fails', { backend: 'command', command: ['node', fake, 'exit', '3'] });
    writeAgent(path.join(t.home, 'agents'), 'gate', { backend: 'command', command: ['node', fake, 'gate', gate] });
    writeAgent(path.join(t.home, 'agents'), 'long', { backend: 'command', command: ['node', fake, 'sleep', '120000'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root }, { capabilities: { tasks: { list: {}, cancel: {} } } });
    await s.client.listTools(); // the client learns launch's taskSupport and output schema
  });
  afterAll(async () => {
    await s.close();
    t.cleanup();
  });

  const tasks = () => s.client.experimental.tasks;
  const createTask = (args: Record<string, unknown>) =>
    s.client.request({ method: 'tools/call', params: { name: 'launch', arguments: args, task: { ttl: 60_000 } } }, CreateTaskResultSchema);

  it('declares the capability, and launch (only launch) may run as a task', async () => {
    expect(s.client.getServerCapabilities()?.tasks).toEqual({ list: {}, cancel: {}, requests: { tools: { call: {} } } });
    const listed = (await s.client.listTools()).tools;
    expect(listed.find((x) => x.name === 'launch')!.execution).toEqual({ taskSupport: 'optional' });
    for (const x of listed.filter((y) => y.name !== 'launch')) expect(x.execution, x.name).toBeUndefined();
  });

  it('callToolStream: task created (id = run id), polled to completed, the result is the run\'s status and validates', async () => {
    const seen: string[] = [];
    let taskId = '';
    let result: Record<string, any> | undefined;
    for await (const m of tasks().callToolStream({ name: 'launch', arguments: { agent: 'echo', task: 'hello through a task' } }, CallToolResultSchema, { task: { ttl: 60_000 } })) {
      seen.push(m.type);
      if (m.type === 'taskCreated') taskId = m.task.taskId;
      if (m.type === 'result') result = m.result as Record<string, any>;
      if (m.type === 'error') throw m.error;
    }
    expect(seen[0]).toBe('taskCreated');
    expect(seen.at(-1)).toBe('result');
    expect(taskId).toMatch(/^r-/);
    // What status returns for the ended run (the SDK validated it against launch's outputSchema on the way).
    const sv = result!.structuredContent;
    expect(sv).toMatchObject({ runId: taskId, state: 'completed', output: { text: 'hello through a task' } });
    expect(sv.next).toBe('Ended completed: the run\'s output is output.text.');
    const status = sc(await s.call('status', { runId: taskId }));
    expect(status).toMatchObject({ runId: taskId, state: 'completed' });
    expect(await tasks().getTask(taskId)).toMatchObject({ taskId, status: 'completed', ttl: null });
  });

  it('create → get → list → cancel → result: the cancel stops the run and its processes', async () => {
    fs.rmSync(gate, { force: true });
    const created = await createTask({ agent: 'long', task: 'wait for a cancel' });
    const taskId = created.task.taskId;
    expect(created.task).toMatchObject({ status: 'working', ttl: null });
    expect(created.task.pollInterval).toBeGreaterThan(0);
    expect(await tasks().getTask(taskId)).toMatchObject({ taskId, status: 'working' });
    const listed = await tasks().listTasks();
    expect(listed.tasks.map((x) => x.taskId)).toContain(taskId);
    const runDir = path.join(t.home, 'runs', taskId);
    expect(await until(() => pidsMentioning(path.join(t.home, 'runs', taskId)).length > 0 || fs.existsSync(path.join(runDir, 'out')))).toBe(true);

    const cancelled = await tasks().cancelTask(taskId);
    expect(cancelled).toMatchObject({ taskId, status: 'cancelled' });
    expect(cancelled.statusMessage).toMatch(/^CANCELLED: /);
    // The run itself is cancelled, not only a task record: status says so, and nothing of it runs any more.
    expect(sc(await s.call('status', { runId: taskId })).state).toBe('cancelled');
    const token = JSON.parse(fs.readFileSync(path.join(runDir, 'run.json'), 'utf8')).runToken as string;
    expect(await until(() => pidsMentioning(token).length === 0, 10_000)).toBe(true);

    const r = await tasks().getTaskResult(taskId, CallToolResultSchema);
    expect(sc(r as never)).toMatchObject({ runId: taskId, state: 'cancelled', error: { code: 'CANCELLED' } });
    // An ended task cannot be cancelled again: the spec's invalid-params error.
    await expect(tasks().cancelTask(taskId)).rejects.toThrow(/terminal/);
  });

  it('tasks/result blocks until the run ends; a failed run is a failed task whose result is its status', async () => {
    fs.rmSync(gate, { force: true });
    const held = await createTask({ agent: 'gate', task: 'held' });
    let settled = false;
    const result = tasks().getTaskResult(held.task.taskId, CallToolResultSchema).then((r) => { settled = true; return r; });
    await new Promise((r) => setTimeout(r, 500));
    expect(settled).toBe(false);
    fs.writeFileSync(gate, '');
    expect(sc((await result) as never)).toMatchObject({ runId: held.task.taskId, state: 'completed' });

    const failed = await createTask({ agent: 'fails', task: 'x' });
    const r = await tasks().getTaskResult(failed.task.taskId, CallToolResultSchema);
    expect(sc(r as never)).toMatchObject({ state: 'failed', error: { code: 'STEP_FAILED' } });
    const task = await tasks().getTask(failed.task.taskId);
    expect(task.status).toBe('failed');
    expect(task.statusMessage).toMatch(/^STEP_FAILED: /);
  });

  it('a plain launch still answers at once with the run; refusals and other tools as tasks are JSON-RPC errors', async () => {
    const plain = await s.call('launch', { agent: 'echo', task: 'plain' });
    expect(plain.isError, textOf(plain)).toBeFalsy();
    expect(sc(plain)).toMatchObject({ state: 'running', capacity: { active: expect.any(Number) } });
    expect(sc(plain).next).toContain(sc(plain).runId);

    const refused = await createTask({ agent: 'nope', task: 'x' }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(McpError);
    // The SDK client puts `MCP error <code>: ` before the message it received: the message itself starts with the code.
    expect((refused as McpError).message).toMatch(/^MCP error -32602: UNKNOWN_AGENT: /);
    const other = await s.client.request({ method: 'tools/call', params: { name: 'status', arguments: {}, task: {} } }, CreateTaskResultSchema).catch((e: unknown) => e);
    expect((other as McpError).message).toMatch(/^MCP error -32601: status does not run as a task.*Only launch runs as a task/);
    await expect(tasks().getTask('r-doesnotexist000000000000')).rejects.toThrow(/^MCP error -32602: Task not found: RUN_NOT_FOUND/);
    // A task request without its taskId: invalid params saying what is missing, not an internal error dumping schema issues.
    for (const method of ['tasks/get', 'tasks/result', 'tasks/cancel'] as const) {
      for (const params of [{}, { taskId: 42 }]) {
        const bad = await s.client.request({ method, params } as never, CallToolResultSchema).catch((e: unknown) => e);
        expect((bad as McpError).code, method).toBe(-32602);
        expect((bad as McpError).message).toBe(`MCP error -32602: INVALID_INPUT: ${method} needs params.taskId, a string (the run id launch answered). Call again with it.`);
      }
    }
  });

  it('another session sees none of these tasks: get, result and cancel answer not found, list leaves them out', async () => {
    const mine = (await createTask({ agent: 'echo', task: 'mine' })).task.taskId;
    const other = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root }, { capabilities: { tasks: { list: {}, cancel: {} } } });
    try {
      const theirs = other.client.experimental.tasks;
      await expect(theirs.getTask(mine)).rejects.toThrow(/Task not found: RUN_NOT_FOUND/);
      await expect(theirs.getTaskResult(mine, CallToolResultSchema)).rejects.toThrow(/Task not found/);
      await expect(theirs.cancelTask(mine)).rejects.toThrow(/Task not found/);
      expect((await theirs.listTasks()).tasks).toEqual([]);
    } finally {
      await other.close();
    }
  });
});
