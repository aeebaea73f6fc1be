/**
 * server.json, the entry for the official MCP Registry, checked against the fields the registry's docs list for the
 * 2025-12-11 schema (no published npm package ships that schema) and against the package itself: the registry
 * refuses an npm package whose package.json `mcpName` differs from the entry's name, and the environment variables
 * offered to users must be the settings the server reads, with its real defaults.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import * as z from 'zod';
import { loadSettings } from '../../src/config.js';
import { SETTING_ENV_NAMES } from '../../src/serve-flags.js';
import { BACKENDS } from '../../src/agents/types.js';
import { REPO } from '../helpers/paths.js';

const exactVersion = z.string().min(1).max(255).refine((v) => v !== 'latest' && !/[\^~<>=*|x ]|^\d+(\.\d+)?$/.test(v), 'a version range');

const EnvironmentVariable = z.strictObject({
  name: z.string().regex(/^[A-Z][A-Z0-9_]*$/),
  description: z.string().min(1),
  isRequired: z.boolean().optional(),
  isSecret: z.boolean().optional(),
  format: z.enum(['string', 'number', 'boolean', 'filepath']).optional(),
  default: z.string().optional(),
  placeholder: z.string().optional(),
  choices: z.array(z.string()).optional(),
  value: z.string().optional(),
});

const ServerJson = z.strictObject({
  $schema: z.literal('https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json'),
  // Reverse-DNS namespace, exactly one slash; the server part starts and ends with a letter or digit.
  name: z.string().min(3).max(200).regex(/^[a-zA-Z0-9.-]+\/[a-zA-Z0-9](?:[a-zA-Z0-9._-]*[a-zA-Z0-9])?$/),
  description: z.string().min(1).max(100),
  version: exactVersion,
  repository: z.strictObject({ url: z.url(), source: z.string(), id: z.string().optional(), subfolder: z.string().optional() }).optional(),
  websiteUrl: z.url().optional(),
  packages: z.array(z.strictObject({
    registryType: z.literal('npm'),
    // The official registry accepts npm packages from the public registry only.
    registryBaseUrl: z.literal('https://registry.npmjs.org'),
    identifier: z.string().min(1),
    version: exactVersion,
    runtimeHint: z.string().optional(),
    transport: z.strictObject({ type: z.literal('stdio') }),
    environmentVariables: z.array(EnvironmentVariable),
  })).length(1),
});

const read = (f: string) => JSON.parse(fs.readFileSync(path.join(REPO, f), 'utf8')) as Record<string, unknown>;

describe('server.json (the MCP Registry entry)', () => {
  const doc = read('server.json');
  const pkg = read('package.json') as { name: string; version: string; mcpName: string; files: string[] };

  it('has the fields and shapes the registry documents', () => {
    const r = ServerJson.safeParse(doc);
    expect(r.success, r.success ? '' : z.prettifyError(r.error)).toBe(true);
  });

  it('names the npm package as published: mcpName, identifier and versions agree with package.json, and the file ships', () => {
    const s = ServerJson.parse(doc);
    expect(s.name).toBe(pkg.mcpName);
    expect(s.version).toBe(pkg.version);
    expect(s.packages[0]!.identifier).toBe(pkg.name);
    expect(s.packages[0]!.version).toBe(pkg.version);
    expect(pkg.files).toContain('server.json');
  });

  it('offers exactly the settings the server reads, each described, with the defaults the server uses', () => {
    const vars = ServerJson.parse(doc).packages[0]!.environmentVariables;
    const binVars = BACKENDS.filter((b) => b !== 'command').map((b) => `SUBAGENTS_BIN_${b.toUpperCase()}`);
    expect(vars.map((v) => v.name).sort()).toEqual([...SETTING_ENV_NAMES, ...binVars].sort());
    const defaults = loadSettings({}, {}, REPO) as unknown as Record<string, unknown>;
    for (const v of vars) {
      const key = v.name.replace(/^SUBAGENTS_/, '').toLowerCase().replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
      if (typeof defaults[key] === 'number') {
        expect(v.default, v.name).toBe(String(defaults[key]));
        expect(v.format, v.name).toBe('number');
      } else {
        expect(v.default, `${v.name} has no fixed default`).toBeUndefined();
      }
      expect(v.isRequired ?? false, v.name).toBe(false);
    }
    // Whoever knows a session id sees that session's runs, and the Redis URL carries its password: clients should
    // keep both like secrets.
    expect(vars.filter((v) => v.isSecret).map((v) => v.name)).toEqual(['SUBAGENTS_SESSION_ID', 'SUBAGENTS_REDIS_URL']);
  });
});
