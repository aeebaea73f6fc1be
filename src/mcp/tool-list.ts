import fs from 'node:fs';
import path from 'node:path';
import { DIST_DIR } from '../paths.js';

/** One entry of tools/list, as sent. */
export interface ListedTool {
  name: string;
  title: string;
  description: string;
  annotations: Record<string, unknown>;
  execution?: { taskSupport: 'optional' };
  inputSchema: { type: 'object' } & Record<string, unknown>;
  outputSchema: { type: 'object' } & Record<string, unknown>;
  _meta?: Record<string, unknown>;
}

/**
 * tools/list, rendered from the zod schemas at build time (scripts/post-build.mjs). Serving it from this file keeps the
 * tools' zod schemas, their JSON Schema conversion and the handlers' module graph off the start-up path: clients list
 * tools right after initialize, and they load after that (server.ts). A test checks the file against a fresh render.
 */
export const TOOL_LIST_FILE = path.join(DIST_DIR, 'tools-list.json');

let cached: ListedTool[] | null = null;

/** The built list, or null when there is none (running from source): the caller renders it then. */
export function readToolList(file = TOOL_LIST_FILE): ListedTool[] | null {
  if (cached) return cached;
  try {
    const parsed = JSON.parse(fs.readFileSync(file, 'utf8')) as { tools?: ListedTool[] };
    if (Array.isArray(parsed.tools)) cached = parsed.tools;
  } catch { /* absent or unreadable: rendered instead */ }
  return cached;
}

/** Writes `file` atomically enough for a build step (a server starting meanwhile reads the old or the new file). */
export function writeToolList(tools: ListedTool[], file = TOOL_LIST_FILE): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  fs.writeFileSync(tmp, `${JSON.stringify({ tools })}\n`);
  fs.renameSync(tmp, file);
}
