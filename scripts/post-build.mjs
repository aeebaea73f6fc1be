// Marks the bin executable after tsc (npm does it on install, not for a local build).
import fs from 'node:fs';
fs.chmodSync(new URL('../dist/main.js', import.meta.url), 0o755);
