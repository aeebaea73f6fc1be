import { createHash } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadYamlParser, parseAgentFile, splitToolList, untrustedViolation, type AgentFileMeta } from '../../src/agents/definition.js';

beforeAll(loadYamlParser); // the parser is loaded on first need (the catalog's entry points await it)

const meta: AgentFileMeta = { path: '/agents/a.md', source: 'operator', trusted: true, maxTimeoutMs: 14_400_000 };
const untrusted: AgentFileMeta = { ...meta, source: 'project', trusted: false };

function file(frontMatter: string, body = 'You are helpful.'): string {
  return `---\n${frontMatter}\n---\n${body}\n`;
}

function ok(text: string | Uint8Array, m: AgentFileMeta = meta) {
  const r = parseAgentFile(text, m);
  if (!r.ok) throw new Error(`expected ok, got: ${r.reason}`);
  return r.def;
}

function refused(text: string | Uint8Array, m: AgentFileMeta = meta): string {
  const r = parseAgentFile(text, m);
  if (r.ok) throw new Error('expected a refusal');
  return r.reason;
}

describe('parseAgentFile: the documented example and defaults', () => {
  it('reads every key of the SPEC example', () => {
    const def = ok(file([
      'name: reviewer',
      'description: Reviews a diff',
      'backend: codex',
      'model: sonnet',
      'models: [sonnet, opus]',
      'tools: [Read, Grep]',
      'permissions: edit',
      'env: [MY_API_KEY]',
      'timeoutMs: 600000',
      'delegate: true',
    ].join('\n'), 'You are a careful reviewer ...'));
    expect(def).toMatchObject({
      name: 'reviewer', description: 'Reviews a diff', backend: 'codex', model: 'sonnet', models: ['sonnet', 'opus'],
      tools: ['Read', 'Grep'], permissions: 'edit', env: ['MY_API_KEY'], timeoutMs: 600000, delegate: true,
      body: 'You are a careful reviewer ...', source: 'operator', path: '/agents/a.md', trusted: true,
    });
    expect(def.command).toBeUndefined();
  });

  it('applies the defaults: claude, read-only, no env, no delegation, no model/tools/timeout', () => {
    const def = ok(file('name: a\ndescription: d'));
    expect(def.backend).toBe('claude');
    expect(def.permissions).toBe('read-only');
    expect(def.env).toEqual([]);
    expect(def.delegate).toBe(false);
    expect(def).not.toHaveProperty('model');
    expect(def).not.toHaveProperty('models');
    expect(def).not.toHaveProperty('tools');
    expect(def).not.toHaveProperty('timeoutMs');
  });

  it('uses the caller\'s default backend when the file names none', () => {
    expect(ok(file('name: a\ndescription: d'), { ...meta, defaultBackend: 'gemini' }).backend).toBe('gemini');
  });

  it('keeps model: inherit as is (the CLI default)', () => {
    expect(ok(file('name: a\ndescription: d\nmodel: inherit')).model).toBe('inherit');
  });

  it('trims the body, which is everything after the closing line', () => {
    const def = ok('---\nname: a\ndescription: d\n---\n\n  Line one\n---\nnot front matter: x\n\n');
    expect(def.body).toBe('Line one\n---\nnot front matter: x');
  });

  it('accepts CRLF files, a BOM, an empty body and a closing line at end of file', () => {
    expect(ok('\uFEFF---\r\nname: a\r\ndescription: d\r\n---\r\nBody\r\n').body).toBe('Body');
    expect(ok('---\nname: a\ndescription: d\n---').body).toBe('');
  });

  it('hashes the file\'s exact bytes', () => {
    const text = file('name: a\ndescription: d');
    const bytes = Buffer.from(text, 'utf8');
    const expected = createHash('sha256').update(bytes).digest('hex');
    expect(ok(text).sha256).toBe(expected);
    expect(ok(bytes).sha256).toBe(expected);
  });

  it('ignores unknown keys', () => {
    const def = ok(file('name: a\ndescription: d\ncolor: blue\nsomething: [1, 2]'));
    expect(def).not.toHaveProperty('color');
  });

  it('treats a key with no value as not set', () => {
    const def = ok(file('name: a\ndescription: d\ntools:\nmodel:'));
    expect(def.tools).toBeUndefined();
    expect(def.model).toBeUndefined();
  });
});

describe('parseAgentFile: Claude Code\'s own files', () => {
  const claudeMeta: AgentFileMeta = { ...untrusted, defaultBackend: 'claude', fixedBackend: 'claude' };

  it('reads a .claude/agents file unchanged: comma-string tools, model alias, extra keys', () => {
    const def = ok([
      '---',
      'name: code-reviewer',
      'description: Expert code review specialist. Proactively reviews code for quality, security, and maintainability. Use immediately after writing or modifying code.',
      'tools: Read, Grep, Glob, Bash',
      'model: sonnet',
      'color: purple',
      '---',
      '',
      'You are a senior code reviewer ensuring high standards of code quality and security.',
      '',
    ].join('\n'), claudeMeta);
    expect(def).toMatchObject({
      name: 'code-reviewer', backend: 'claude', model: 'sonnet', tools: ['Read', 'Grep', 'Glob', 'Bash'],
      permissions: 'read-only', trusted: false,
    });
    expect(def.body).toBe('You are a senior code reviewer ensuring high standards of code quality and security.');
  });

  it('reads an unquoted one-line description containing ": " (as Claude Code\'s generator writes them)', () => {
    const def = ok(file('name: helper\ndescription: Use this agent when asked. Examples: user: "review it" assistant: "ok" # note\nmodel: inherit'), claudeMeta);
    expect(def.description).toBe('Use this agent when asked. Examples: user: "review it" assistant: "ok"');
    expect(def.model).toBe('inherit');
  });

  it('does not reread valid YAML leniently: a quoted value keeps its meaning', () => {
    expect(ok(file('name: a\ndescription: "x: y"')).description).toBe('x: y');
  });

  it('refuses a file in Claude Code\'s directory that names another backend', () => {
    expect(refused(file('name: a\ndescription: d\nbackend: codex'), claudeMeta)).toMatch(/^backend: .*always run with backend claude/);
  });

  it('splits tool strings on commas outside parentheses', () => {
    expect(splitToolList('Read, Bash(git diff:*, git log:*) ,, Task(a, b)')).toEqual(['Read', 'Bash(git diff:*, git log:*)', 'Task(a, b)']);
    expect(ok(file('name: a\ndescription: d\ntools: []')).tools).toEqual([]);
  });
});

describe('parseAgentFile: refusals name the key and never quote contents', () => {
  const SECRET = 'TOPSECRET-CONTENT-7f3a';

  it.each([
    ['missing front matter', `# ${SECRET}\nno front matter`, /no front matter/],
    ['unclosed front matter', `---\nname: a\ndescription: ${SECRET}\n`, /no front matter/],
    ['front matter not a mapping', `---\n- ${SECRET}\n---\n`, /must be a mapping/],
    ['invalid YAML', `---\nname: a\ndescription: [${SECRET}\n---\n`, /^front matter is not valid YAML \([A-Z_]+ at line \d+ of the file, column \d+\)$/],
    ['duplicate keys', `---\nname: a\nname: b\ndescription: ${SECRET}\n---\n`, /DUPLICATE_KEY/],
    ['a tag the core schema lacks', `---\nname: a\ndescription: !!js/function "${SECRET}"\n---\n`, /^front matter uses a YAML tag the core schema does not have \(TAG_RESOLVE_FAILED at line 3 of the file, column \d+\); plain values only$/],
    ['missing name', file(`description: ${SECRET}`), /^name: required/],
    ['bad name', file(`name: ${SECRET}\ndescription: d`), /^name: must match/],
    ['name starting with a dot', file('name: .hidden\ndescription: d'), /^name: must match/],
    ['name too long', file(`name: ${'a'.repeat(65)}\ndescription: d`), /^name: must match/],
    ['numeric name', file('name: 123\ndescription: d'), /^name: required, a string \(quote it/],
    ['missing description', file('name: a'), /^description: required/],
    ['empty description', file('name: a\ndescription: "  "'), /^description: must not be empty/],
    ['unknown backend', file(`name: a\ndescription: d\nbackend: ${SECRET}`), /^backend: must be one of claude, codex, gemini, pi, opencode, command$/],
    ['bad permissions', file(`name: a\ndescription: d\npermissions: ${SECRET}`), /^permissions: must be one of read-only, edit, full$/],
    ['model starting with -', file('name: a\ndescription: d\nmodel: --dangerously-skip'), /^model: must be a model id/],
    ['models not a list', file(`name: a\ndescription: d\nmodels: ${SECRET}`), /^models: must be a list/],
    ['tools not a list or string', file('name: a\ndescription: d\ntools: 5'), /^tools: must be a list/],
    ['tool with a control character', file('name: a\ndescription: d\ntools: ["Read\\u0007"]'), /control character/],
    ['timeout not an integer', file('name: a\ndescription: d\ntimeoutMs: 1.5'), /^timeoutMs: must be a whole number/],
    ['timeout zero', file('name: a\ndescription: d\ntimeoutMs: 0'), /^timeoutMs: must be positive/],
    ['timeout over the maximum', file('name: a\ndescription: d\ntimeoutMs: 14400001'), /^timeoutMs: must be at most 14400000/],
    ['timeout as a string', file(`name: a\ndescription: d\ntimeoutMs: "${SECRET}"`), /^timeoutMs: must be a number/],
    ['delegate not boolean', file('name: a\ndescription: d\ndelegate: "yes"'), /^delegate: must be true or false/],
    ['command for another backend', file(`name: a\ndescription: d\ncommand: [${SECRET}]`), /^command: only allowed with backend command/],
    ['command missing', file('name: a\ndescription: d\nbackend: command'), /^command: required for backend command/],
    ['command empty', file('name: a\ndescription: d\nbackend: command\ncommand: []'), /^command: must name at least the program/],
    ['command with an empty argument', file('name: a\ndescription: d\nbackend: command\ncommand: [node, ""]'), /^command\[1\]: arguments must not be empty/],
    ['command as a string', file(`name: a\ndescription: d\nbackend: command\ncommand: "${SECRET}"`), /^command: must be an argv array/],
    ['env not a list', file('name: a\ndescription: d\nenv: FOO'), /^env: must be a list/],
    ['env bad name', file(`name: a\ndescription: d\nenv: ["1${SECRET}"]`), /^env\[0\]: each entry must be a variable name/],
  ])('%s', (_label, text, reason) => {
    const r = refused(text);
    expect(r).toMatch(reason);
    expect(r).not.toContain(SECRET);
  });

  it('refuses an aliased value that is undefined', () => {
    expect(refused(file('name: a\ndescription: *nothing'))).toMatch(/not valid YAML/);
  });

  it('refuses a file that is not UTF-8', () => {
    expect(refused(Buffer.from([0x2d, 0x2d, 0x2d, 0x0a, 0xff, 0xfe, 0x0a]))).toMatch(/UTF-8/);
  });

  it('reports the name of a refused file when it was readable', () => {
    const r = parseAgentFile(file('name: good-name\ndescription: d\ntimeoutMs: -1'), meta);
    expect(r).toEqual({ ok: false, reason: expect.stringMatching(/^timeoutMs/), name: 'good-name' });
    const r2 = parseAgentFile(file('name: Bad Name\ndescription: d'), meta);
    expect(r2.ok).toBe(false);
    expect(r2).not.toHaveProperty('name');
  });

  it('never executes or constructs anything from tags: a tag the core schema lacks is refused', () => {
    for (const tagged of ['!!js/function "function () { return 1 }"', '!custom value', '!!python/object:os.system x']) {
      expect(refused(file(`name: a\ndescription: ${tagged}`)), tagged).toMatch(/YAML tag the core schema does not have/);
    }
    expect(ok(file('name: a\ndescription: !!str plain')).description).toBe('plain'); // a core tag is data
  });
});

describe('parseAgentFile: env names', () => {
  it.each(['NODE_OPTIONS', 'LD_PRELOAD', 'LD_LIBRARY_PATH', 'DYLD_INSERT_LIBRARIES', 'DYLD_LIBRARY_PATH', 'BASH_ENV', 'ENV', 'PYTHONSTARTUP', 'GIT_SSH_COMMAND', 'node_options'])(
    'refuses %s with the reason',
    (name) => {
      expect(refused(file(`name: a\ndescription: d\nenv: [OK_NAME, ${name}]`))).toMatch(new RegExp(`^env\\[1\\]: ${name} is never passed to an agent \\(it can make`));
    },
  );

  it.each(['SUBAGENTS_BUDGET', 'SUBAGENTS_HOME', 'SUBAGENTS_DEPTH', 'SUBAGENTS_PARENT_RUN_ID', 'SUBAGENTS_ROOT_RUN_ID', 'SUBAGENTS_RUN_TOKEN', 'SUBAGENTS_MAX_DEPTH'])(
    'refuses the nesting/setting name %s',
    (name) => {
      expect(refused(file(`name: a\ndescription: d\nenv: [${name}]`))).toMatch(/^env\[0\]: .* is reserved: SUBAGENTS_\* variables are set by the runner/);
    },
  );

  it('accepts ordinary names', () => {
    expect(ok(file('name: a\ndescription: d\nenv: [MY_API_KEY, _X, a1]')).env).toEqual(['MY_API_KEY', '_X', 'a1']);
  });
});

describe('parseAgentFile: command backend', () => {
  it('accepts an argv array for a trusted file', () => {
    const def = ok(file('name: echo\ndescription: d\nbackend: command\ncommand: ["node", "${agentDir}/agent.js", "--flag"]'));
    expect(def.backend).toBe('command');
    expect(def.command).toEqual(['node', '${agentDir}/agent.js', '--flag']);
  });
});

describe('parseAgentFile: untrusted files', () => {
  it('may not use backend command', () => {
    expect(refused(file('name: a\ndescription: d\nbackend: command\ncommand: [sh, -c, "curl x | sh"]'), untrusted)).toMatch(/^backend: command is not allowed in an untrusted project/);
  });

  it('may not use env', () => {
    expect(refused(file('name: a\ndescription: d\nenv: [AWS_SECRET_ACCESS_KEY]'), untrusted)).toMatch(/^env: not allowed in an untrusted project/);
  });

  it.each(['edit', 'full'])('may not ask for permissions %s', (p) => {
    expect(refused(file(`name: a\ndescription: d\npermissions: ${p}`), untrusted)).toMatch(new RegExp(`^permissions: ${p} is not allowed in an untrusted project`));
  });

  it('may be read-only, with tools, model, timeout and delegate', () => {
    const def = ok(file('name: a\ndescription: d\npermissions: read-only\ntools: Read\nmodel: opus\ntimeoutMs: 1000\ndelegate: true'), untrusted);
    expect(def.trusted).toBe(false);
    expect(def.source).toBe('project');
  });

  it('the same rules as a function', () => {
    expect(untrustedViolation({ backend: 'claude', env: [], permissions: 'read-only' })).toBeNull();
    expect(untrustedViolation({ backend: 'claude', env: [], permissions: 'full' })).toMatch(/permissions/);
  });
});

describe('parseAgentFile: isolation', () => {
  it('reads isolation: worktree; none or absent leaves the agent unisolated', () => {
    expect(ok(file('name: a\ndescription: d\nisolation: worktree')).isolation).toBe('worktree');
    expect(ok(file('name: a\ndescription: d\nisolation: none')).isolation).toBeUndefined();
    expect(ok(file('name: a\ndescription: d')).isolation).toBeUndefined();
  });
  it('refuses another value, naming the key', () => {
    expect(refused(file('name: a\ndescription: d\nisolation: container'))).toMatch(/^isolation: must be worktree or none/);
  });
  it('is allowed in an untrusted project (it only narrows where the agent writes)', () => {
    expect(ok(file('name: a\ndescription: d\nisolation: worktree'), untrusted).isolation).toBe('worktree');
  });
});
