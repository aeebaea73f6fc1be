/**
 * The Claude Desktop bundle: manifest.json passes `mcpb validate`, `npm run bundle:mcpb`'s script packs the package's
 * files with it, and the packed bundle, unpacked into an empty directory (no node_modules, as a host installs it),
 * starts from the command the manifest declares, with its variables replaced by mcpb's own code (what Claude Desktop
 * uses), serves the seven tools, and runs the demo end to end.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { getMcpConfigForManifest, type McpbManifestAny } from '@anthropic-ai/mcpb';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO } from '../helpers/paths.js';
import { tempStateHome } from '../helpers/state-home.js';

const run = promisify(execFile);
const MCPB_CLI = path.join(REPO, 'node_modules', '@anthropic-ai', 'mcpb', 'dist', 'cli', 'cli.js');
const read = (f: string) => JSON.parse(fs.readFileSync(f, 'utf8')) as Record<string, unknown>;

describe('the MCP Bundle (.mcpb)', () => {
  let t: ReturnType<typeof tempStateHome>;
  let unpacked: string;
  let bundleBytes = 0;
  beforeAll(async () => {
    t = tempStateHome('sa-mcpb-');
    const file = path.join(t.base, 'subagents-mcp.mcpb');
    await run(process.execPath, [path.join(REPO, 'scripts', 'bundle-mcpb.mjs'), file], { cwd: REPO, timeout: 120_000 });
    bundleBytes = fs.statSync(file).size;
    unpacked = path.join(t.base, 'installed');
    await run(process.execPath, [MCPB_CLI, 'unpack', file, unpacked], { timeout: 60_000 });
  }, 180_000);
  afterAll(() => t.cleanup());

  it('manifest.json passes `mcpb validate`, and says what package.json and the server say', async () => {
    const r = await run(process.execPath, [MCPB_CLI, 'validate', path.join(REPO, 'manifest.json')], { timeout: 30_000 });
    expect(r.stdout).toContain('validation passes');
    const manifest = read(path.join(REPO, 'manifest.json')) as { version: string; tools: Array<{ name: string }>; compatibility: { platforms: string[]; runtimes: { node: string } } };
    const pkg = read(path.join(REPO, 'package.json')) as { version: string; engines: { node: string } };
    expect(manifest.version).toBe(pkg.version);
    expect(manifest.compatibility.runtimes.node).toBe(pkg.engines.node);
    expect(manifest.compatibility.platforms.sort()).toEqual(['darwin', 'linux']);
    const listed = (read(path.join(REPO, 'dist', 'tools-list.json')) as { tools: Array<{ name: string }> }).tools.map((x) => x.name);
    expect(manifest.tools.map((x) => x.name).sort()).toEqual(listed.sort());
  });

  it('holds the package files and the manifest, and no node_modules or test files', () => {
    expect(bundleBytes).toBeGreaterThan(0);
    expect(fs.existsSync(path.join(unpacked, 'manifest.json'))).toBe(true);
    expect(fs.existsSync(path.join(unpacked, 'dist', 'server.js'))).toBe(true);
    expect(fs.existsSync(path.join(unpacked, 'agents', 'demo-summarizer.md'))).toBe(true);
    expect(fs.existsSync(path.join(unpacked, 'node_modules'))).toBe(false);
    expect(fs.existsSync(path.join(unpacked, 'test'))).toBe(false);
  });

  it("starts from the manifest's command, as a host fills it in, and lists the tools", async () => {
    const manifest = read(path.join(unpacked, 'manifest.json')) as unknown as McpbManifestAny;
    const config = await getMcpConfigForManifest({
      manifest, extensionPath: unpacked, systemDirs: {}, userConfig: { project_dir: t.root }, pathSeparator: path.sep,
    });
    expect(config).toBeDefined();
    // Unset optional settings become empty values (the server's "not given"), never a literal ${user_config.…}.
    expect(JSON.stringify(config)).not.toContain('${');
    expect(config!.env?.SUBAGENTS_ROOTS).toBe(t.root);
    const transport = new StdioClientTransport({
      command: config!.command, args: config!.args, env: { ...getDefaultEnvironment(), ...config!.env, SUBAGENTS_HOME: t.home }, stderr: 'pipe',
    });
    const client = new Client({ name: 'mcpb-test', version: '1.0.0' });
    try {
      await client.connect(transport);
      const tools = (await client.listTools()).tools.map((x) => x.name).sort();
      expect(tools).toEqual(['agents', 'append', 'cancel', 'dashboard', 'dismiss', 'launch', 'restore', 'status']);
      const agents = await client.callTool({ name: 'agents', arguments: {} });
      expect(agents.isError ?? false).toBe(false);
    } finally {
      await client.close().catch(() => {});
    }
  });

  it('runs a real run from the unpacked files alone: the demo completes and prints commands that work there', async () => {
    const env = { ...process.env, SUBAGENTS_HOME: path.join(t.base, 'demo-home'), NO_COLOR: '1' };
    delete env.SUBAGENTS_TEST_FAULT;
    const r = await run(process.execPath, [path.join(unpacked, 'dist', 'main.js'), 'demo'], { cwd: t.base, env, timeout: 50_000 });
    expect(r.stdout).toMatch(/run r-\S+ completed/);
    const hint = /Look at it again: (.*) show (r-\S+)/.exec(r.stdout);
    expect(hint?.[1]).toMatch(new RegExp(`node ${path.join(fs.realpathSync(unpacked), 'dist', 'main.js').replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$`));
    const show = await run(process.execPath, [path.join(unpacked, 'dist', 'main.js'), 'show', hint![2]!], { env, timeout: 30_000 });
    expect(show.stdout).toContain('completed');
  });
});
