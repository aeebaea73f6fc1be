import type { StepSpec, StepStatus } from './run-types.js';

/** The initial (pending) status of a step; a group's members are keyed `<index>.<member>`. */
export function newStepStatus(index: number, spec: StepSpec): StepStatus {
  const base = (key: string, agent: string, idx: number): StepStatus => ({
    index: idx, key, agent, state: 'pending', exitCode: null, signal: null, startedAt: null, endedAt: null,
    process: null, usage: null, costUsd: null, error: null, appendSeq: null, outputBytes: 0, outputTruncated: false,
  });
  if (spec.kind === 'agent') return base(String(index), spec.agent.name, index);
  const st = base(String(index), 'parallel', index);
  st.members = spec.members.map((m, j) => base(`${index}.${j}`, m.agent.name, j));
  return st;
}
