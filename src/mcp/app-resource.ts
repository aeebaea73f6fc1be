import fs from 'node:fs';
import path from 'node:path';
import type { ReadResourceResult } from '@modelcontextprotocol/sdk/types.js';
import { SubagentError } from '../errors.js';
import { DIST_DIR } from '../paths.js';

/** The MCP App's resource: the dashboard page, one HTML document with its script and style inside (built once). */
export const DASHBOARD_URI = 'ui://subagents/dashboard';
/** The MCP Apps mime type (the same string as ext-apps' RESOURCE_MIME_TYPE; its server module is not loaded for a constant). */
export const APP_MIME_TYPE = 'text/html;profile=mcp-app';
export const APP_HTML_FILE = path.join(DIST_DIR, 'page', 'mcp-app.html');

let html: string | null = null;

export function readAppResource(): ReadResourceResult {
  try {
    html ??= fs.readFileSync(APP_HTML_FILE, 'utf8');
  } catch {
    throw new SubagentError('INTERNAL', 'the dashboard app is not built (dist/page/mcp-app.html is missing); reinstall the package or run npm run build.');
  }
  // The page talks only to the host (tool calls through the bridge): it needs no network origin at all.
  return { contents: [{ uri: DASHBOARD_URI, mimeType: APP_MIME_TYPE, text: html, _meta: { ui: { prefersBorder: true, csp: { connectDomains: [], resourceDomains: [] } } } }] };
}
