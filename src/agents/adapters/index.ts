import type { Backend, BackendAdapter } from '../types.js';
import { claudeAdapter } from './claude.js';
import { codexAdapter } from './codex.js';
import { commandAdapter } from './command.js';
import { geminiAdapter } from './gemini.js';
import { opencodeAdapter } from './opencode.js';
import { piAdapter } from './pi.js';

/** The allowlist of backends: name → adapter. */
const ADAPTERS: Partial<Record<Backend, BackendAdapter>> = {
  claude: claudeAdapter,
  codex: codexAdapter,
  gemini: geminiAdapter,
  pi: piAdapter,
  opencode: opencodeAdapter,
  command: commandAdapter,
};

export function adapterFor(backend: Backend): BackendAdapter | undefined {
  return ADAPTERS[backend];
}

/** Every adapter (a chain's runner must be able to serve any backend an append may bring). */
export function allAdapters(): BackendAdapter[] {
  return Object.values(ADAPTERS).filter((a): a is BackendAdapter => a !== undefined);
}
