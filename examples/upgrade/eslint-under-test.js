#!/usr/bin/env node
// The pinned eslint's own command line.
require("eslint/bin/eslint.js");
