// Builds the dashboard's page once, into dist/page/: app.js (one esbuild bundle of src/ui/page/http-main.ts), app.css
// and index.html, served as files by `subagents-mcp ui` (no inline script: its CSP forbids it). Nothing is fetched
// from a CDN: the page works offline.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const src = path.join(repo, 'src', 'ui', 'page');
const out = path.join(repo, 'dist', 'page');

export async function buildUi() {
  const esbuild = await import('esbuild');
  fs.mkdirSync(out, { recursive: true });
  const common = { bundle: true, format: 'esm', platform: 'browser', target: 'es2022', minify: true, legalComments: 'none', logLevel: 'warning', write: false };
  const app = await esbuild.build({ ...common, entryPoints: [path.join(src, 'http-main.ts')] });
  fs.writeFileSync(path.join(out, 'app.js'), app.outputFiles[0].contents);
  fs.copyFileSync(path.join(src, 'app.css'), path.join(out, 'app.css'));
  fs.copyFileSync(path.join(src, 'index.html'), path.join(out, 'index.html'));
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await buildUi();
