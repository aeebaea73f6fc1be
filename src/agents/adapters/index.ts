import type { Backend, BackendAdapter } from '../types.js';
import { commandAdapter } from './command.js';

/** The allowlist of backends: name → adapter. */
const ADAPTERS: Partial<Record<Backend, BackendAdapter>> = {
  command: commandAdapter,
};

export function adapterFor(backend: Backend): BackendAdapter | undefined {
  return ADAPTERS[backend];
}
