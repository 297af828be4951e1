'use strict';
// The demo daemon: keeps sessions, answers the CLI over a Unix socket. It "warms up" before it
// listens (as a real daemon loads indexes or models), which is what makes a cold start slow: a
// fixed amount of CPU work (DEMO_DAEMON_WARM_UP_ROUNDS), then a wait (DEMO_DAEMON_WARM_UP_MS),
// so the work it does is the same on every start, however fast the machine (the instruction
// lens counts it). It says "ready" on stdout once it listens.

const fs = require('fs');
const net = require('net');
const { socketPath } = require('./client.js');

const WARM_UP_ROUNDS = Number(process.env.DEMO_DAEMON_WARM_UP_ROUNDS || 2_000_000);
const WARM_UP_MS = Number(process.env.DEMO_DAEMON_WARM_UP_MS || 350);
const sessions = new Map();
let next = 1;

function handle(message) {
  switch (message.type) {
    case 'hello':
      return { ok: true, sessions: sessions.size };
    case 'open-session': {
      const id = `s${next++}`;
      sessions.set(id, { opened: Date.now() });
      return { ok: true, id };
    }
    case 'stop-sessions': {
      const stopped = sessions.size;
      sessions.clear();
      return { ok: true, stopped };
    }
    default:
      return { ok: false, error: `unknown request ${message.type}` };
  }
}

function listen() {
  const path = socketPath();
  try {
    fs.unlinkSync(path);
  } catch {
    // no stale socket
  }
  net
    .createServer((socket) => {
      let buffer = '';
      socket.setEncoding('utf8');
      socket.on('data', (chunk) => {
        buffer += chunk;
        let end;
        while ((end = buffer.indexOf('\n')) >= 0) {
          const line = buffer.slice(0, end);
          buffer = buffer.slice(end + 1);
          let answer;
          try {
            answer = handle(JSON.parse(line));
          } catch (err) {
            answer = { ok: false, error: err.message };
          }
          socket.write(`${JSON.stringify(answer)}\n`);
        }
      });
      socket.on('error', () => {});
    })
    .listen(path, () => process.stdout.write('ready\n'));
}

// Busy warm-up: real work, so it costs CPU like a real start would, then the wait.
let x = 0;
for (let i = 0; i < WARM_UP_ROUNDS; i++) x += Math.sqrt(x + 1);
setTimeout(listen, WARM_UP_MS);
