/**
 * Runs tests on Node 24, the active LTS, beside the suite on the machine's Node (CI runs both: .ci/run). Node 24 comes
 * from the npm registry's node-<platform>-<arch> package, installed into the test cache (test/helpers/node-lines.ts),
 * and goes first on PATH, so the servers, runners and fake agents the tests start (`process.execPath` or `node`) run
 * on it too. With no arguments: the end-to-end part (real servers, runners, the CLI, the Inspector, the bundle); with
 * arguments: those test files or folders (`npm run test:node24 -- test` is the whole suite).
 * Usage: npm run test:node24 [-- <vitest filters and flags>]
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { NODE24_VERSION, binDir, node24 } from './node-lines.js';
import { REPO } from './paths.js';

const END_TO_END = ['test/e2e', 'test/mcp', 'test/cli', 'test/distribution'];
// In the default set: a second fresh clone would repeat the first one's `npm ci` for little more than its output.
const SKIPPED = ['test/cli/fresh-clone.test.ts'];

const args = process.argv.slice(2);
const node = await node24();
if (!node.bin) {
  process.stderr.write(`Node ${NODE24_VERSION} could not be installed: ${node.problem}\n`);
  process.exit(1);
}
process.stdout.write(`Tests on Node ${NODE24_VERSION} (${node.bin})\n`);
const vitest = path.join(REPO, 'node_modules', 'vitest', 'vitest.mjs');
const chosen = args.some((a) => !a.startsWith('-'));
const filters = chosen ? args : [...END_TO_END, ...SKIPPED.flatMap((f) => ['--exclude', f]), ...args];
const child = spawn(node.bin, [vitest, 'run', ...filters], {
  cwd: REPO,
  stdio: 'inherit',
  env: { ...process.env, PATH: `${binDir(node.bin)}${path.delimiter}${process.env.PATH ?? ''}` },
});
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
