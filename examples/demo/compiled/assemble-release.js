#!/usr/bin/env node
'use strict';
// Assembles the demo's compiled release: demo-<version>-linux-x64.tar.gz, holding demo-cli/ as
// the npm package lays it out, but with bin/demo the single executable (scripts/build-binary.js)
// instead of the script, and no lib/ (the executable carries it).
//   usage: node scripts/assemble-release.js BINARIES RELEASE VERSION

const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const ROOT = path.join(__dirname, '..');

function main([binaries, release, version]) {
  if (!binaries || !release || !version) throw new Error('usage: assemble-release.js BINARIES RELEASE VERSION');
  const stage = fs.mkdtempSync(path.join(os.tmpdir(), 'demo-release-'));
  try {
    const top = path.join(stage, 'demo-cli');
    fs.mkdirSync(path.join(top, 'bin'), { recursive: true });
    fs.copyFileSync(path.join(binaries, 'demo'), path.join(top, 'bin', 'demo'));
    fs.chmodSync(path.join(top, 'bin', 'demo'), 0o755);
    fs.copyFileSync(path.join(ROOT, 'package.json'), path.join(top, 'package.json'));
    for (const dir of ['kernel', 'bench']) fs.cpSync(path.join(ROOT, dir), path.join(top, dir), { recursive: true });
    fs.mkdirSync(release, { recursive: true });
    const archive = path.resolve(release, `demo-${version}-linux-x64.tar.gz`);
    // The fastest gzip: the archive is made on every prepare, and its size is what is measured.
    execFileSync('tar', ['-I', 'gzip -1', '-cf', archive, '-C', stage, 'demo-cli']);
    console.log(`assembled ${archive} (${fs.statSync(archive).size} bytes)`);
  } finally {
    fs.rmSync(stage, { recursive: true, force: true });
  }
}

main(process.argv.slice(2));
