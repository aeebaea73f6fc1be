/** Placeholder until the people's CLI lands. */
export async function runCli(argv: string[], version: string): Promise<number> {
  if (argv[0] === '--version' || argv[0] === '-V') { process.stdout.write(`${version}\n`); return 0; }
  if (argv[0] === 'demo') { const { runDemo } = await import('./demo.js'); return runDemo(argv.slice(1)); }
  process.stderr.write('usage: subagents-mcp [serve] | demo\n');
  return 2;
}
