/**
 * Writes `schemas/`: the JSON Schema of every tool's input and output, generated from the zod schemas the server
 * publishes in tools/list (the same function makes both, so the files are exactly what clients see).
 *
 *   npm run schemas                               regenerate
 *   node dist/scripts/gen-schemas.js --check      exit 1 and name the stale files when schemas/ is out of date
 *   node dist/scripts/gen-schemas.js --tool-list  write dist/tools-list.json, what tools/list serves (the build does)
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeToolList } from '../mcp/tool-list.js';
import { renderToolList, TOOLS } from '../mcp/tools/all.js';
import { toJsonSchema } from '../mcp/schemas.js';

export const SCHEMAS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'schemas');

/** File name → content of every schema file, in a stable order. */
export function renderSchemas(): Map<string, string> {
  const out = new Map<string, string>();
  for (const tool of TOOLS) {
    for (const [kind, schema] of [['input', tool.input], ['output', tool.output]] as const) {
      const name = `${tool.name}.${kind}.schema.json`;
      const json = {
        $schema: 'https://json-schema.org/draft/2020-12/schema',
        $id: name,
        title: `${tool.name} ${kind}`,
        ...toJsonSchema(schema),
      };
      out.set(name, JSON.stringify(json, null, 2) + '\n');
    }
  }
  return out;
}

/** Names of files that differ from what would be generated, are missing, or are left over from a removed tool. */
export function staleSchemas(dir = SCHEMAS_DIR): string[] {
  const want = renderSchemas();
  const stale: string[] = [];
  for (const [name, text] of want) {
    let have: string | null = null;
    try { have = fs.readFileSync(path.join(dir, name), 'utf8'); } catch { have = null; }
    if (have !== text) stale.push(name);
  }
  let present: string[] = [];
  try { present = fs.readdirSync(dir).filter((n) => n.endsWith('.schema.json')); } catch { /* none */ }
  for (const n of present) if (!want.has(n)) stale.push(n);
  return stale;
}

function main(argv: string[]): number {
  if (argv.includes('--tool-list')) {
    writeToolList(renderToolList());
    return 0;
  }
  if (argv.includes('--check')) {
    const stale = staleSchemas();
    if (stale.length) {
      process.stderr.write(`schemas/ is stale (${stale.join(', ')}); run: npm run build && npm run schemas\n`);
      return 1;
    }
    process.stderr.write('schemas/ is up to date\n');
    return 0;
  }
  fs.mkdirSync(SCHEMAS_DIR, { recursive: true });
  const want = renderSchemas();
  for (const n of fs.readdirSync(SCHEMAS_DIR)) {
    if (n.endsWith('.schema.json') && !want.has(n)) fs.unlinkSync(path.join(SCHEMAS_DIR, n));
  }
  for (const [name, text] of want) fs.writeFileSync(path.join(SCHEMAS_DIR, name), text);
  process.stderr.write(`wrote ${want.size} schema files to ${SCHEMAS_DIR}\n`);
  return 0;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = main(process.argv.slice(2));
}
