'use strict';
// One JSON request to the daemon over its Unix socket, one JSON answer.

const net = require('net');
const os = require('os');
const path = require('path');

function socketPath() {
  return path.join(os.homedir(), '.demo', 'daemon.sock');
}

function request(message) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath());
    let buffer = '';
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(`${JSON.stringify(message)}\n`));
    socket.on('data', (chunk) => {
      buffer += chunk;
      const end = buffer.indexOf('\n');
      if (end >= 0) {
        socket.end();
        resolve(JSON.parse(buffer.slice(0, end)));
      }
    });
    socket.on('error', reject);
  });
}

module.exports = { request, socketPath };
