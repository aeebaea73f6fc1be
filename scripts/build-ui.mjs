// Builds the dashboard's page once, into dist/page/: app.js (one esbuild bundle of src/ui/page/http-main.ts), app.css
// and index.html, served as files by `subagents-mcp ui` (no inline script: its CSP forbids it), and mcp-app.html, the
// same page for MCP Apps hosts (src/ui/page/mcp-main.ts). Nothing is fetched from a CDN: the page works offline.
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
  // The MCP App (a `ui://` resource): one HTML document with the bridge build of the page and the style inside it,
  // as MCP Apps hosts require. `</script` cannot appear inside the inline script.
  const mcp = await esbuild.build({ ...common, entryPoints: [path.join(src, 'mcp-main.ts')] });
  const js = Buffer.from(mcp.outputFiles[0].contents).toString('utf8').replaceAll('</script', '<\\/script');
  const css = fs.readFileSync(path.join(src, 'app.css'), 'utf8').replaceAll('</style', '<\\/style');
  const html = fs.readFileSync(path.join(src, 'index.html'), 'utf8')
    .replace('<link rel="stylesheet" href="app.css">', () => `<style>${css}</style>`)
    .replace('<script type="module" src="app.js"></script>', () => `<script type="module">${js}</script>`);
  if (html.includes('src="app.js"') || html.includes('href="app.css"')) throw new Error('build-ui: index.html no longer has the tags mcp-app.html replaces');
  fs.writeFileSync(path.join(out, 'mcp-app.html'), html);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await buildUi();
