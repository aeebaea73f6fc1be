/**
 * What `serve` loads: the server and its flag parser (an entry point, like main.ts, so that mcp/ need not know the
 * command line). The build bundles this module, with everything it may load later, into one file (dist/server.js): a
 * server then resolves one module instead of ~30 chunks, whose path handling alone made V8 optimize Node's URL and
 * path helpers while the server sat idle (see docs/performance.md).
 */
export { serve } from './mcp/serve.js';
export { parseServeFlags } from './serve-flags.js';
