// Bundled in place of graceful-fs (see scripts/bundle.mjs): Node's own fs.
module.exports = require('node:fs');
