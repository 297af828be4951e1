#!/usr/bin/env node
'use strict';
// Builds the demo as one Linux x64 executable with Node's single executable applications:
// bundles the CLI's modules (bin/, lib/ and package.json) into one script, has node make the
// preparation blob of it (--experimental-sea-config), and adds that blob to a copy of this
// node as the note Node looks for (elf-note.js, no postject), which then runs it.
//   usage: node scripts/build-binary.js [--out DIR]   (default dist; writes DIR/demo)

const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const { addNote, blowFuse } = require('./elf-note.js');

const ROOT = path.join(__dirname, '..');
// Where the bundled modules seem to live: the paths they spawn (`process.execPath` with
// `${__dirname}/daemon.js`) name a module of the bundle, which the executable then runs.
const BUNDLE_ROOT = '/snapshot/demo-cli';
const SEA_FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';

function modules() {
  const found = ['package.json'];
  for (const dir of ['bin', 'lib']) {
    for (const name of fs.readdirSync(path.join(ROOT, dir)).sort()) {
      if (name.endsWith('.js') || name.endsWith('.json')) found.push(`${dir}/${name}`);
    }
  }
  return found;
}

// Each module as a function of (exports, require, module, __filename, __dirname), as Node wraps
// them; JSON as its value.
function wrapped(name) {
  const text = fs.readFileSync(path.join(ROOT, name), 'utf8');
  const body = name.endsWith('.json') ? `module.exports = ${text.trim()};` : text.replace(/^#!.*\n/, '');
  return `${JSON.stringify(name)}: function (exports, require, module, __filename, __dirname) {\n${body}\n}`;
}

function bundle() {
  return `'use strict';
// demo-cli as one script, made by scripts/build-binary.js: its modules by path, each loaded on
// its first require. Built-in modules come from Node.
const builtin = require;
const path = builtin('path');
const ROOT = ${JSON.stringify(BUNDLE_ROOT)};
const sources = {
${modules().map(wrapped).join(',\n')}
};
const loaded = new Map();
const nameOf = (file) => (file.startsWith(ROOT + '/') ? path.relative(ROOT, file) : null);
function resolve(file) {
  const name = nameOf(file);
  if (name !== null && sources[name]) return file;
  if (name !== null && sources[name + '.js']) return file + '.js';
  throw new Error(\`Cannot find module '\${file}' in the demo's bundle\`);
}
function load(file) {
  const name = nameOf(file);
  if (loaded.has(name)) return loaded.get(name).exports;
  const module = { exports: {}, filename: file, loaded: false };
  loaded.set(name, module);
  const dir = path.dirname(file);
  const local = (id) => (/^\\.{0,2}\\//.test(id) ? load(resolve(path.resolve(dir, id))) : builtin(id));
  sources[name].call(module.exports, module.exports, local, module, file, dir);
  module.loaded = true;
  return module.exports;
}
// \`demo ARGS\` runs bin/demo.js; \`demo ${BUNDLE_ROOT}/lib/X.js ARGS\` (how the program starts a
// module of its own with process.execPath) runs that module, with the argv node would give it.
const asked = process.argv[2];
if (asked !== undefined && nameOf(asked) !== null && sources[nameOf(asked)]) {
  process.argv.splice(1, 1);
  load(asked);
} else {
  process.argv[1] = path.join(ROOT, 'bin/demo.js');
  load(process.argv[1]);
}
`;
}

function main(args) {
  const at = args.indexOf('--out');
  const out = path.resolve(at >= 0 ? args[at + 1] : path.join(ROOT, 'dist'));
  fs.mkdirSync(out, { recursive: true });
  const script = path.join(out, 'demo-bundle.js');
  const blob = path.join(out, 'demo.blob');
  const config = path.join(out, 'sea-config.json');
  fs.writeFileSync(script, bundle());
  fs.writeFileSync(config, JSON.stringify({ main: script, output: blob, disableExperimentalSEAWarning: true }));
  execFileSync(process.execPath, ['--experimental-sea-config', config], { stdio: 'inherit' });
  const executable = blowFuse(addNote(fs.readFileSync(process.execPath), 'NODE_SEA_BLOB', fs.readFileSync(blob)), SEA_FUSE);
  const target = path.join(out, 'demo');
  fs.writeFileSync(target, executable, { mode: 0o755 });
  fs.chmodSync(target, 0o755);
  // It runs, and it is the demo.
  const said = execFileSync(target, ['--version'], { encoding: 'utf8' }).trim();
  const version = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version;
  if (said !== `demo ${version}`) throw new Error(`the single executable says ${JSON.stringify(said)}, not demo ${version}`);
  console.log(`built ${target} (${executable.length} bytes): ${said}`);
}

main(process.argv.slice(2));
