'use strict';
// Transport benches, run against the source (not an installation); each prints one
// `RESULT {"value": N, ...}` line.
//   node bench/transport.js frames   seconds to decode one 32 MiB frame fed in 8 KiB chunks,
//                                    after a 256 KiB warm-up frame
//   node bench/transport.js switch   full-history transfers in one warm switch into a
//                                    2,000-message session through a real catalog daemon

const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const { spawn } = require('child_process');
const { performance } = require('perf_hooks');
const { FrameDecoder, frame } = require('../lib/frames.js');

const CHUNK = 8 * 1024;

function decodeInChunks(bytes) {
  const decoder = new FrameDecoder();
  let frames = 0;
  for (let at = 0; at < bytes.length; at += CHUNK) frames += decoder.push(bytes.subarray(at, at + CHUNK)).length;
  return frames;
}

function frames() {
  decodeInChunks(frame(256 * 1024));
  const big = frame(32 * 1024 * 1024);
  const start = performance.now();
  const decoded = decodeInChunks(big);
  const seconds = (performance.now() - start) / 1000;
  if (decoded !== 1) throw new Error(`decoded ${decoded} frames instead of 1`);
  return { value: seconds, bytes: big.length - 4, chunk: CHUNK };
}

/** A throwaway catalog with two sessions, the second large. */
function fixture(root) {
  const dir = path.join(root, 'sessions');
  fs.mkdirSync(dir, { recursive: true });
  fs.mkdirSync(path.join(root, 'jobs'));
  for (const [name, count] of [['small', 10], ['large', 2000]]) {
    const lines = [JSON.stringify({ type: 'session', id: `id-${name}`, name })];
    for (let m = 1; m <= count; m++) lines.push(JSON.stringify({ type: 'message', role: 'user', text: `message ${m}` }));
    fs.writeFileSync(path.join(dir, `${name}.jsonl`), `${lines.join('\n')}\n`);
  }
}

function connect(socketPath, daemon) {
  return new Promise((resolve, reject) => {
    const deadline = Date.now() + 30000;
    const attempt = () => {
      const socket = net.connect(socketPath);
      socket.once('connect', () => resolve(socket));
      socket.once('error', (err) => {
        if (daemon.exitCode !== null || Date.now() > deadline) reject(err);
        else setTimeout(attempt, 20);
      });
    };
    attempt();
  });
}

async function switchFetch() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'demo-switch-'));
  fixture(root);
  const socketPath = path.join(root, 'catalog.sock');
  const daemon = spawn(process.execPath, [path.join(__dirname, '..', 'bin', 'demo.js'), 'daemon', '--socket', socketPath, '--root', root], {
    stdio: 'inherit',
  });
  try {
    const socket = await connect(socketPath, daemon);
    socket.setEncoding('utf8');
    const messages = [];
    const waiting = [];
    let buffer = '';
    socket.on('data', (chunk) => {
      buffer += chunk;
      let end;
      while ((end = buffer.indexOf('\n')) >= 0) {
        const message = JSON.parse(buffer.slice(0, end));
        buffer = buffer.slice(end + 1);
        messages.push(message);
        if (message.type === 'response') waiting.shift()(message);
      }
    });
    let next = 0;
    const command = (body) =>
      new Promise((resolve, reject) => {
        const id = `c${++next}`;
        waiting.push((reply) => (reply.success ? resolve(reply) : reject(new Error(reply.error))));
        socket.write(`${JSON.stringify({ type: 'command', id, command: { ...body, id } })}\n`);
      });
    await command({ type: 'open', name: 'small' });
    await command({ type: 'open', name: 'large' });
    await command({ type: 'switch', name: 'small' });
    const before = messages.length;
    const reply = await command({ type: 'switch', name: 'large' });
    const transfers = messages.slice(before).filter((m) => m.type === 'event' && m.event.kind === 'history').length;
    socket.end();
    return { value: transfers, messages: reply.data.messages };
  } finally {
    daemon.kill('SIGTERM');
    await new Promise((resolve) => (daemon.exitCode !== null ? resolve() : daemon.once('exit', resolve)));
    fs.rmSync(root, { recursive: true, force: true });
  }
}

async function main(which) {
  const bench = { frames, switch: switchFetch }[which];
  if (!bench) throw new Error('usage: transport.js frames|switch');
  const result = await bench();
  console.log(`${which}: ${JSON.stringify(result)}`);
  console.log(`RESULT ${JSON.stringify(result)}`);
}

main(process.argv[2]).catch((err) => {
  console.error(`transport: ${err.message}`);
  process.exit(1);
});
