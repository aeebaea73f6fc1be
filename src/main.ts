#!/usr/bin/env node
/**
 * The bin entry. `serve` (or no command) speaks MCP on stdio; the other commands are for people at a terminal.
 * Each command's module is imported only when used, so the server starts without loading the CLI's code.
 */
import { enableCompileCache } from './compile-cache.js';
import { loadServer } from './server-load.js';
import { packageVersion } from './version.js';

enableCompileCache();

const argv = process.argv.slice(2);
const first = argv[0];

// `--help` anywhere (`serve --help`) is for a person: the command line prints it.
const wantsHelp = argv.some((a) => a === '--help' || a === '-h');

if (!wantsHelp && (first === undefined || first === 'serve' || (first.startsWith('--') && first !== '--version' && first !== '-V'))) {
  const { entry, saveCacheWhenIdle } = await loadServer();
  const rest = first === 'serve' ? argv.slice(1) : argv;
  await entry.serve(entry.parseServeFlags(rest), packageVersion());
  saveCacheWhenIdle();
} else {
  const { runCli } = await import('./cli/program.js');
  process.exitCode = await runCli(argv, packageVersion());
}
