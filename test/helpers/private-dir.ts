import { mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { firstInsecureAncestor } from '../../src/agents/adapters/shared.js';
import { REPO } from './paths.js';

/**
 * A 0700 directory none of whose ancestors is group/world-writable (Gemini ignores its settings file below such a
 * directory, and the OS temp dir is one). The checkout's own cache dir when the checkout is in a private place, else a
 * folder under the user's ~/.cache (a clone under /tmp, as CI may make, is not private).
 */
export function privateTestDir(name: string): string {
  const candidates = [path.join(REPO, 'node_modules', '.cache', name), path.join(os.homedir(), '.cache', 'subagents-mcp-tests', name)];
  for (const dir of candidates) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    if (firstInsecureAncestor(dir) === undefined) return dir;
  }
  return candidates[0]!;
}
