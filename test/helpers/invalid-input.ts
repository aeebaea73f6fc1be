/**
 * Malformed tool arguments that every server answers `INVALID_INPUT` (docs/contract.md, "Tools"), whatever its mode:
 * shared by the in-process contract test and the two-mode suite so both check the same list.
 */
export const INVALID_INPUT_CASES: ReadonlyArray<[string, Record<string, unknown>]> = [
  ['launch', {}],
  ['launch', { agent: 'echo' }],
  ['launch', { agent: 'echo', task: 5 }],
  ['launch', { agent: 'echo', task: '' }],
  ['launch', { agent: 'echo', task: 'x', bogus: true }],
  ['launch', { agent: 'echo', task: 'x', tasks: [{ agent: 'echo', task: 'y' }] }],
  ['launch', { tasks: [] }],
  ['launch', { agent: 'echo', task: 'x', concurrency: 2 }],
  ['launch', { agent: 'echo', task: 'x', timeoutMs: 1.5 }],
  ['launch', { agent: 'echo', task: 'x', label: 'l'.repeat(201) }],
  ['launch', { agent: 'echo', task: 'x'.repeat(2 * 1024 * 1024) }],
  ['status', { waitMs: 'soon' }],
  ['status', { outputBytes: 10 ** 9 }],
  ['status', { until: 'forever' }],
  ['cancel', {}],
  ['dismiss', {}],
  ['append', { runId: 'r-x' }],
  ['restore', {}],
  ['agents', { extra: 1 }],
  ['no-such-tool', {}],
];
