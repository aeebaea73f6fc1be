// After tsc: bundle the server into dist/main.js (scripts/bundle.mjs), then mark the bin executable (npm does it on
// install, not for a local build).
import fs from 'node:fs';
import { bundle } from './bundle.mjs';

await bundle();
fs.chmodSync(new URL('../dist/main.js', import.meta.url), 0o755);
