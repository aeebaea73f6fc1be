import { spawnSync } from 'node:child_process';

/**
 * An argv prefix that runs a command in a fresh network namespace with only loopback up, when this machine allows one
 * (root: `unshare -n`; else unprivileged user namespaces: `unshare -rn`); an empty prefix, said on stderr, when it
 * does not. Real CLIs run under it talk only to the mocks the tests start beside them.
 */
export function networkNamespacePrefix(tag: string): string[] {
  const upLo = ['sh', '-c', 'ip link set lo up 2>/dev/null || /sbin/ip link set lo up; exec "$@"', 'sh'];
  for (const unshare of [['unshare', '-n', '--'], ['unshare', '-rn', '--']]) {
    const prefix = [...unshare, ...upLo];
    if (spawnSync(prefix[0]!, [...prefix.slice(1), 'true'], { stdio: 'ignore', timeout: 10_000 }).status === 0) return prefix;
  }
  process.stderr.write(`[${tag}] no network namespace available: relying on the machine having no route out\n`);
  return [];
}
