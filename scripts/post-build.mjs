// After tsc: render tools/list into dist/tools-list.json (served from there: src/mcp/tool-list.ts), bundle the bin,
// the server, the command line and the runner (scripts/bundle.mjs), build the dashboard's page (scripts/build-ui.mjs),
// then mark the bin dist/main.js executable (npm does it on install, not for a local build).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { bundle } from './bundle.mjs';
import { buildUi } from './build-ui.mjs';

execFileSync(process.execPath, [fileURLToPath(new URL('../dist/scripts/gen-schemas.js', import.meta.url)), '--tool-list'], { stdio: 'inherit' });
await bundle();
await buildUi();
fs.chmodSync(new URL('../dist/main.js', import.meta.url), 0o755);
