/**
 * Tests that drive a system program (Debian's `chromium`, `redis-server`). CI always runs them: `.ci/run` installs
 * both, so a missing one fails there. Elsewhere they are skipped, saying so, when the program is not installed: the
 * README's `npm test` needs neither.
 */
export function skipWithout(pkg: string, installed: boolean): boolean {
  const skip = !installed && process.env.CI !== 'true';
  if (skip) process.stderr.write(`skipped: the tests that need ${pkg} (not installed; apt-get install ${pkg}, as .ci/run does)\n`);
  return skip;
}
