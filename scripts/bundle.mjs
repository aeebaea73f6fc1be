// Bundles the build after tsc: dist/main.js (the bin: a few lines that pick serve or the command line), dist/server.js
// (everything a server runs, one file), dist/cli.js with its lazily loaded dist/chunk-*.js (the command line) and
// dist/yaml.js. A cold start then parses a few files instead of several hundred modules of the SDK, zod and ajv
// (docs/performance.md).
// The runner is bundled on its own, as CommonJS: dist/runner/main.cjs loads only Node built-ins before it reports
// ready; what it loads after that (its supervisor) is dist/runner-supervisor.cjs.
// Every chunk lands in dist/ itself, so src/paths.ts finds dist/ from import.meta.url in either build.
// Without esbuild (SUBAGENTS_NO_BUNDLE=1, or the module missing) dist/main.js stays the unbundled tsc entry.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dist = path.join(repo, 'dist');

/** The CommonJS bundles; a tsc-only build removes them (the server and the runner would prefer them). */
const CJS_BUNDLES = [path.join(dist, 'runner', 'main.cjs'), path.join(dist, 'runner-supervisor.cjs'), path.join(dist, 'server.cjs')];

/** Options both bundles share. */
const COMMON = {
  bundle: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  minify: true,
  sourcemap: 'linked',
  legalComments: 'none',
  logLevel: 'warning',
  // proper-lockfile's graceful-fs is Node's fs here: its queueing on EMFILE and its polyfills for old Node do nothing
  // for the lock directories proper-lockfile makes (mkdir, stat, utimes, rmdir), and loading it (it clones and patches
  // fs, and pulls in assert and stream) was ~8 ms of CPU at every server start and every runner's supervisor load.
  alias: { 'graceful-fs': path.join(repo, 'scripts', 'bundle-shims', 'graceful-fs.cjs') },
  // CommonJS dependencies (proper-lockfile, commander) call require() on built-ins, and only on built-ins (esbuild
  // inlines every package they require). process.getBuiltinModule serves those without createRequire: importing
  // node:module and reading import.meta in each of ~30 chunks was ~3 ms of CPU at every start, and its path work
  // pushed Node's URL and path helpers over V8's optimizing threshold while the server sat idle (idle RSS, +4 MiB).
  banner: { js: "const require=(id)=>{const m=process.getBuiltinModule(id);if(m===void 0)throw new Error('Dynamic require of \"'+id+'\" is not supported');return m};" },
};

/**
 * An esbuild plugin that leaves the given import specifiers out of a bundle, rewritten to another file of dist/: how
 * the separately bundled programs load each other (and the shared YAML parser) at run time.
 */
function linkedFiles(map) {
  const names = Object.keys(map).map((k) => k.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&'));
  return {
    name: 'linked-files',
    setup(build) {
      build.onResolve({ filter: new RegExp(`^(${names.join('|')})$`) }, (args) => ({ path: map[args.path], external: true }));
    },
  };
}

/**
 * For the CommonJS bundles: `import fs from 'node:fs'` becomes the module itself, not esbuild's interop object. esbuild
 * gives every importing file its own `__toESM(require("node:fs"))`, a fresh object with a getter per export (fs has
 * ~100), and the runner's supervisor has 29 of them: ~4 ms of CPU at every load, more than half of its top level.
 * Only modules our sources import by default alone: a named import of them fails the build ("No matching export"),
 * and should then read `fs.statSync` rather than widen this.
 */
const builtinDefaults = {
  name: 'builtin-defaults',
  setup(build) {
    // Our own sources only: a package's named imports (execa's, loaded only by isolated steps) keep esbuild's interop.
    build.onResolve({ filter: /^node:(fs|path|os|net)$/ }, (args) => (
      args.kind === 'import-statement' && !args.importer.includes(`${path.sep}node_modules${path.sep}`) ? { path: args.path, namespace: 'builtin-default' } : undefined));
    build.onLoad({ filter: /.*/, namespace: 'builtin-default' }, (args) => ({ contents: `export default require(${JSON.stringify(args.path)});`, loader: 'js' }));
  },
};

/** The server bundle takes scripts/bundle-shims/sdk-ajv-provider.mjs for the SDK's Ajv provider (it says why). */
const sdkAjvShim = {
  name: 'sdk-ajv-shim',
  setup(build) {
    build.onResolve({ filter: /(^|\/)validation\/ajv(-provider\.js)?$/ }, (args) => (
      args.path === '@modelcontextprotocol/sdk/validation/ajv' || args.importer.includes(`${path.sep}@modelcontextprotocol${path.sep}sdk${path.sep}`)
        ? { path: path.join(repo, 'scripts', 'bundle-shims', 'sdk-ajv-provider.mjs') } : undefined));
  },
};

/**
 * Rewrites each `import("<spec>")` of a CommonJS bundle to `__load("<spec>")`, and fails the build if any
 * other import() is left (src/server-load.ts compiles the bundle without a dynamic import callback).
 */
function linkDynamicImports(file, specs) {
  let code = fs.readFileSync(file, 'utf8');
  for (const spec of specs) {
    const call = `import(${JSON.stringify(spec)})`;
    if (!code.includes(call)) throw new Error(`bundle: ${path.basename(file)} has no ${call} to link`);
    code = code.split(call).join(`__load(${JSON.stringify(spec)})`);
  }
  const left = /(?<![\w$.])import\s*\(/.exec(code);
  if (left) throw new Error(`bundle: ${path.basename(file)} keeps a dynamic import: ${code.slice(left.index, left.index + 60)}`);
  fs.writeFileSync(file, code);
}

export async function bundle() {
  if (process.env.SUBAGENTS_NO_BUNDLE === '1') {
    // Stale runner bundles must not outlive the tsc build they came from: the server would start them.
    for (const f of CJS_BUNDLES) for (const g of [f, `${f}.map`]) fs.rmSync(g, { force: true });
    return false;
  }
  let esbuild;
  try {
    esbuild = await import('esbuild');
  } catch {
    process.stderr.write('bundle: esbuild is not installed; dist/main.js stays unbundled (slower cold start)\n');
    return false;
  }
  const tmp = fs.mkdtempSync(path.join(dist, '.bundle-'));
  try {
    // Three programs, each bundled on its own, meeting only at the specifiers `linkedFiles` rewrites:
    // - dist/main.js, the bin: a few lines that pick `serve` or the command line;
    // - dist/server.js, everything a server runs, in one file (no chunks): one module to resolve at start instead of
    //   ~30. Module bodies still run only when first imported (esbuild keeps a lazy import lazy inside one file);
    // - dist/cli.js and its chunks, the command line (its commands load when used). Its `serve` imports server.js,
    //   so a process never holds two copies of the server's modules.
    // The YAML parser (~110 KiB) is dist/yaml.js, shared by both and loaded at the first agent file read.
    // Distributed mode's executor with BullMQ and ioredis (~1.3 MiB) is dist/distributed.js, loaded only when
    // SUBAGENTS_REDIS_URL is set: inside server.js it would be parsed at every start. Its copies of our shared modules
    // are harmless (SubagentError's instanceof holds across copies: src/errors.ts).
    const linked = linkedFiles({
      './server-entry.js': './server.js', '../server-entry.js': './server.js',
      './cli/program.js': './cli.js', yaml: './yaml.js', './executor.js': './distributed.js',
    });
    // The bin loads dist/server.cjs on Node 20 (src/server-load.ts); the tsc entry keeps importing the ES module.
    await esbuild.build({
      entryPoints: { main: path.join(repo, 'src', 'main.ts') }, outdir: tmp, ...COMMON, plugins: [linked],
      define: { __SUBAGENTS_SERVER_CJS__: '"./server.cjs"' },
    });
    await esbuild.build({
      entryPoints: { server: path.join(repo, 'src', 'server-entry.ts') },
      outdir: tmp,
      ...COMMON,
      plugins: [linked, sdkAjvShim],
    });
    // The same server as CommonJS, dist/server.cjs, for Node 20, which has no module compile cache: src/server-load.ts
    // compiles it with a V8 code cache (a module cannot take one without a flag). Its two dynamic imports become calls
    // of `__load`, a parameter of the wrapper the loader compiles it in (an import() in a vm.Script needs an
    // experimental loader option); the name is as long as `import`, so the source map stays right. `require` and
    // `__serverFileUrl` (its import.meta.url) are parameters of that wrapper too. `builtinDefaults` matters more here
    // than in the runner: with esbuild's interop objects for its ~50 built-in imports, the copying loop got hot enough
    // for V8 to optimize it during the start, and the optimizing compiler's pages put idle RSS ~6 MiB above the ES
    // module's.
    await esbuild.build({
      entryPoints: [path.join(repo, 'src', 'server-entry.ts')],
      outfile: path.join(tmp, 'server.cjs'),
      ...COMMON,
      format: 'cjs',
      banner: {},
      define: { 'import.meta.url': '__serverFileUrl' },
      plugins: [builtinDefaults, linked, sdkAjvShim],
    });
    linkDynamicImports(path.join(tmp, 'server.cjs'), ['./yaml.js', './distributed.js']);
    await esbuild.build({
      entryPoints: { cli: path.join(repo, 'src', 'cli', 'program.ts') },
      outdir: tmp,
      chunkNames: 'chunk-[hash]',
      ...COMMON,
      splitting: true,
      plugins: [linked],
    });
    await esbuild.build({
      entryPoints: { distributed: path.join(repo, 'src', 'manager', 'distributed', 'executor.ts') },
      outdir: tmp,
      ...COMMON,
      plugins: [linkedFiles({ yaml: './yaml.js' })],
    });
    await esbuild.build({
      stdin: { contents: "import yaml from 'yaml'; export default yaml;", resolveDir: repo, sourcefile: 'yaml-entry.js' },
      outfile: path.join(tmp, 'yaml.js'),
      ...COMMON,
    });
    // The runner, CommonJS: every launch starts one, and Node starts a CommonJS entry ~4 ms sooner than an ES module
    // (no ES module loader to set up: resolution, a module job, the source read through fs/promises), and a CommonJS
    // require of a built-in returns it as it is, where an ES import builds a facade reading every export (fs's
    // ReadStream getter then loads Node's streams). Its entry, dist/runner/main.cjs, still loads only built-ins before
    // ready (its own modules are inlined); the supervisor, dist/runner-supervisor.cjs, comes through a computed
    // require after the start claim. It lands in dist/ itself, so src/paths.ts still resolves dist/ from it.
    const RUNNER_CJS = {
      ...COMMON,
      format: 'cjs',
      // import.meta.url (src/paths.ts) from the file's own path: the 'url' module is loaded by Node's own start-up.
      define: { 'import.meta.url': '__runnerFileUrl' },
      banner: { js: 'var __runnerFileUrl=require("node:url").pathToFileURL(__filename).href;' },
      plugins: [builtinDefaults],
    };
    await esbuild.build({
      entryPoints: [path.join(repo, 'src', 'runner', 'supervise.ts')], outfile: path.join(tmp, 'runner-supervisor.cjs'), ...RUNNER_CJS,
      alias: { ...RUNNER_CJS.alias, assert: path.join(repo, 'scripts', 'bundle-shims', 'assert.cjs') },
    });
    await esbuild.build({ entryPoints: [path.join(repo, 'src', 'runner', 'main.ts')], outfile: path.join(tmp, 'runner', 'main.cjs'), ...RUNNER_CJS });
    // tsc's own entry stays runnable next to the bundle (bench/coldstart.mjs compares the two in one run).
    fs.copyFileSync(path.join(dist, 'main.js'), path.join(dist, 'main.unbundled.js'));
    // New chunks first, the entry last, stale chunks after: a server starting meanwhile finds what it imports.
    const fresh = fs.readdirSync(tmp);
    for (const name of fs.readdirSync(path.join(tmp, 'runner'))) fs.renameSync(path.join(tmp, 'runner', name), path.join(dist, 'runner', name));
    for (const name of fresh) if (name !== 'runner' && !name.startsWith('main.')) fs.renameSync(path.join(tmp, name), path.join(dist, name));
    for (const name of fresh) if (name.startsWith('main.')) fs.renameSync(path.join(tmp, name), path.join(dist, name));
    for (const name of fs.readdirSync(dist)) {
      if (/^chunk-[A-Z0-9]+\.js(\.map)?$/.test(name) && !fresh.includes(name)) fs.rmSync(path.join(dist, name));
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  return true;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await bundle();
