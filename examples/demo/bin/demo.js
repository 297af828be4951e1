#!/usr/bin/env node
// demo: a line editor in raw terminal mode that needs a background daemon. The first start
// launches the daemon (slow: it warms up); later starts find it running (fast). `demo browse`
// is a session browser (lib/tui.js); `demo daemon` the session catalog on a socket
// (lib/catalog.js).
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn } = require('child_process');
const { request, socketPath } = require('../lib/client.js');

const VERSION = require('../package.json').version;
// Knobs for sandbench's validity benchmark (all 0 in a release): see lib/work.js.
const TUNING = require('../lib/tuning.json');

async function ensureDaemon() {
  try {
    return await request({ type: 'hello' });
  } catch {
    // Not running: start it, detached, and wait until it answers.
  }
  fs.mkdirSync(path.dirname(socketPath()), { recursive: true });
  const child = spawn(process.execPath, [path.join(__dirname, '..', 'lib', 'daemon.js')], {
    detached: true,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  // It says "ready" once it listens: waited for, not polled, so a start does the same work
  // however long the daemon takes.
  await new Promise((resolve, reject) => {
    let said = '';
    const timer = setTimeout(() => reject(new Error('the demo daemon did not start')), 600_000);
    child.once('exit', () => reject(new Error('the demo daemon exited while starting')));
    child.stdout.on('data', (chunk) => {
      said += chunk;
      if (said.includes('ready\n')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  child.stdout.destroy();
  child.removeAllListeners('exit');
  child.unref();
  return request({ type: 'hello' });
}

function editor(session) {
  const out = process.stdout;
  let line = '';
  // Replies to our terminal query arrive as input; skip escape sequences.
  let escape = null;
  const draw = () => out.write(`\x1b[?2026h\r\x1b[2K> ${line}\x1b[?2026l`);
  out.write(`session ${session.id}\r\n`);
  out.write('\x1b[6n');
  process.stdin.setRawMode(true);
  process.stdin.resume();
  draw();
  process.stdin.on('data', (data) => {
    for (const byte of data) {
      if (escape !== null) {
        if (escape === '' && byte !== 0x5b && byte !== 0x5d) escape = null;
        else if (byte >= 0x40 && byte <= 0x7e && escape !== '') escape = null;
        else if (byte === 0x07) escape = null;
        else escape += String.fromCharCode(byte);
        continue;
      }
      if (byte === 0x1b) escape = '';
      else if (byte === 0x03) process.exit(0);
      else if (byte === 0x7f) line = line.slice(0, -1);
      else if (byte === 0x0d) {
        out.write(`\r\n(${line.length} characters sent)\r\n`);
        line = '';
      } else if (byte >= 0x20 && byte < 0x7f) line += String.fromCharCode(byte);
    }
    draw();
  });
}

async function main(args) {
  if (args[0] === '--version') {
    console.log(`demo ${VERSION}`);
    return;
  }
  if (args[0] === 'browse' && args.length === 1) {
    require('../lib/tui.js').browse();
    return;
  }
  if (args[0] === 'daemon') {
    require('../lib/catalog.js').main(args.slice(1));
    return;
  }
  if (args[0] === 'sessions' && args[1] === 'stop') {
    console.log(JSON.stringify(await request({ type: 'stop-sessions' })));
    return;
  }
  if (args[0] === 'work' && args.length === 1) {
    console.log(`work ${require('../lib/work.js').work(TUNING)}`);
    process.exit(0);
  }
  if (args.length > 0) {
    console.error(`usage: demo [--version | sessions stop | work | browse | daemon --socket PATH [--root DIR]]`);
    process.exitCode = 2;
    return;
  }
  const extra = Number(TUNING.startup_extra_ms) || 0;
  if (extra > 0) {
    const until = Date.now() + extra;
    while (Date.now() < until);
  }
  process.stdout.write(`demo ${VERSION} in ${process.cwd().replace(os.homedir(), '~')}\r\n`);
  await ensureDaemon();
  editor(await request({ type: 'open-session' }));
}

main(process.argv.slice(2)).catch((err) => {
  console.error(`demo: ${err.message}`);
  process.exit(1);
});
