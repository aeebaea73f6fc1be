// Bundled in place of Node's assert in the runner's supervisor (see scripts/bundle.mjs). Its one user there is
// proper-lockfile's signal-exit 3, which checks that it was handed a callback; loading node:assert for that (it
// pulls in its error classes, colours and call tracker) was ~0.6 ms of CPU in every runner.
'use strict';
module.exports = {
  equal(actual, expected, message) {
    // assert.equal is loose equality
    if (actual != expected) throw new Error(message ?? `${String(actual)} == ${String(expected)}`);
  },
};
