// Builds the MCP Bundle (.mcpb) for one-click installation in Claude Desktop: the files the npm package ships (the list
// `npm pack` makes, so the two never differ), manifest.json beside them, zipped by the mcpb CLI after it validates the
// manifest. No node_modules: the server, the command line and the runner are bundled into dist/ with only Node
// built-ins left to import (scripts/bundle.mjs), so the bundle runs on the Node the host provides.
// Usage: node scripts/bundle-mcpb.mjs [output.mcpb]   (default: subagents-mcp-<version>.mcpb at the repository root)
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const pkg = JSON.parse(fs.readFileSync(path.join(repo, 'package.json'), 'utf8'));
const manifest = JSON.parse(fs.readFileSync(path.join(repo, 'manifest.json'), 'utf8'));
if (manifest.version !== pkg.version) {
  process.stderr.write(`bundle-mcpb: manifest.json says version ${manifest.version}, package.json ${pkg.version}; make them equal\n`);
  process.exit(1);
}
if (!fs.existsSync(path.join(repo, 'dist', 'server.js'))) {
  process.stderr.write('bundle-mcpb: dist/server.js is missing; run `npm run build` with esbuild installed first\n');
  process.exit(1);
}
const output = path.resolve(process.argv[2] ?? path.join(repo, `${pkg.name}-${pkg.version}.mcpb`));
const mcpbCli = path.join(repo, 'node_modules', '@anthropic-ai', 'mcpb', 'dist', 'cli', 'cli.js');

// `npm pack --dry-run --json` lists the package's files (package.json `files`, plus what npm always adds).
const packed = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: repo, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
const files = packed[0].files.map((f) => f.path);

const stage = fs.mkdtempSync(path.join(os.tmpdir(), 'subagents-mcpb-'));
try {
  for (const rel of files) {
    const to = path.join(stage, rel);
    fs.mkdirSync(path.dirname(to), { recursive: true });
    fs.copyFileSync(path.join(repo, rel), to);
  }
  fs.chmodSync(path.join(stage, 'dist', 'main.js'), 0o755);
  fs.copyFileSync(path.join(repo, 'manifest.json'), path.join(stage, 'manifest.json'));
  fs.rmSync(output, { force: true });
  execFileSync(process.execPath, [mcpbCli, 'pack', stage, output], { stdio: ['ignore', 'inherit', 'inherit'] });
} finally {
  fs.rmSync(stage, { recursive: true, force: true });
}
process.stdout.write(`${path.relative(process.cwd(), output) || output}: ${(fs.statSync(output).size / 1024).toFixed(0)} KiB, ${files.length + 1} files\n`);
