'use strict';
// The demo daemon: keeps sessions, answers the CLI over a Unix socket. It "warms up" before it
// listens (as a real daemon loads indexes or models), which is what makes a cold start slow.

const fs = require('fs');
const net = require('net');
const { socketPath } = require('./client.js');

const WARM_UP_MS = Number(process.env.DEMO_DAEMON_WARM_UP_MS || 400);
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
    .listen(path);
}

// Busy warm-up: real work, not a timer, so it costs CPU like a real start would.
const until = Date.now() + WARM_UP_MS;
let x = 0;
while (Date.now() < until) x += Math.sqrt(x + 1);
listen();
