#!/usr/bin/env node
// The pinned eslint's own command line (its bin is not among the package's exports).
const path = require("node:path");
require(path.join(path.dirname(require.resolve("eslint")), "..", "bin", "eslint.js"));
