#!/usr/bin/env node
/**
 * The bin entry. `serve` (or no command) speaks MCP on stdio; the other commands are for people at a terminal.
 * Each command's module is imported only when used, so the server starts without loading the CLI's code.
 */
import v8 from 'node:v8';
import { packageVersion } from './version.js';

const argv = process.argv.slice(2);
const first = argv[0];

// `--help` anywhere (`serve --help`) is for a person: the command line prints it.
const wantsHelp = argv.some((a) => a === '--help' || a === '-h');

if (!wantsHelp && (first === undefined || first === 'serve' || (first.startsWith('--') && first !== '--version' && first !== '-V'))) {
  // A server idles most of its life: its young generation keeps its first size rather than doubling under the
  // start-up's allocations, which it never needs again (idle RSS −2 MiB, see docs/performance.md). Set before the
  // server's modules load: they are most of those allocations.
  v8.setFlagsFromString('--semi-space-growth-factor=1');
  const { serve } = await import('./mcp/serve.js');
  const { parseServeFlags } = await import('./cli/serve-flags.js');
  const rest = first === 'serve' ? argv.slice(1) : argv;
  await serve(parseServeFlags(rest), packageVersion());
} else {
  const { runCli } = await import('./cli/program.js');
  process.exitCode = await runCli(argv, packageVersion());
}
