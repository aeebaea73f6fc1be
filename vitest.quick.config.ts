import { defineConfig } from 'vitest/config';
import base from './vitest.config.js';

/**
 * `npm run test:quick`: the tests that start no MCP server, runner or agent CLI: the in-process MCP tier
 * (test/contract) and the unit tests of modules that stand on their own. Under a minute, for someone changing one
 * file; `npm test` (every file, what CI runs) stays the judge.
 */
export default defineConfig({
  ...base,
  test: {
    ...base.test,
    // Replaces the base list (mergeConfig would append to it).
    include: [
      'test/contract/**/*.test.ts',
      'test/*.test.ts',
      'test/agents/adapters/*.test.ts',
      'test/agents/{agent-env,catalog,definition,resolve-bin}.test.ts',
      'test/store/*.test.ts',
      'test/process/*.test.ts',
      'test/manager/{agent-resolver,session-record}.test.ts',
      'test/sessions/{dismiss,isolation}.test.ts',
      'test/resources/listing-paging.test.ts',
      'test/runner/{claim-start,entry-imports}.test.ts',
      'test/mcp/server-bundle.test.ts',
      'test/distribution/server-json.test.ts',
    ],
  },
});
