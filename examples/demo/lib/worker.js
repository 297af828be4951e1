'use strict';
// A catalog worker: loads one session (every message parsed), says it is ready, then answers
// `history` requests on stdin with the whole history, one JSON line each.

const fs = require('fs');

const file = process.argv[2];
const lines = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim());
const header = JSON.parse(lines[0]);
const messages = lines.slice(1).map((l) => JSON.parse(l));
process.stdout.write(`${JSON.stringify({ ready: true, id: header.id, messages: messages.length })}\n`);

let buffer = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => {
  buffer += chunk;
  let end;
  while ((end = buffer.indexOf('\n')) >= 0) {
    const request = JSON.parse(buffer.slice(0, end));
    buffer = buffer.slice(end + 1);
    if (request.type === 'history') process.stdout.write(`${JSON.stringify({ messages })}\n`);
  }
});
process.stdin.on('end', () => process.exit(0));
