'use strict';
// demo daemon: the session catalog over JSON lines on a Unix socket. Each connection first gets
// a hello; then commands, each in an envelope {type: "command", id, protocol, command}, get a
// {type: "response", id, success, data | error}. Progress comes as {type: "event", event}.
//   catalog   the paused scheduled jobs with their sessions' names and first messages; the first
//             request indexes every session on disk, later ones answer from the index
//   list      the sessions resident in a worker
//   open      a session by name in a new worker process (a cold start), answered once it loaded
//   switch    to a session (opening it if needed); its full history comes as a `history` event
//   usage: demo daemon --socket PATH [--root DIR]   (DIR defaults to ~/.demo/catalog)

const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const { spawn } = require('child_process');

const PROTOCOL = { name: 'demo.catalog', version: 1 };

class Catalog {
  constructor(root) {
    this.root = root;
    this.index = null; // name → { id, name, file, firstMessage }
    this.jobs = null;
    this.workers = new Map(); // session id → { child, pending, ready }
  }

  /** Every session's header and first message, read once. */
  indexSessions() {
    if (this.index) return this.index;
    const dir = path.join(this.root, 'sessions');
    const index = new Map();
    for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.jsonl'))) {
      const text = fs.readFileSync(path.join(dir, file), 'utf8');
      const [header, first] = text.split('\n', 2).map((line) => (line ? JSON.parse(line) : null));
      index.set(header.name, { id: header.id, name: header.name, file: path.join(dir, file), firstMessage: first ? first.text : '' });
    }
    this.index = index;
    return index;
  }

  catalog() {
    if (!this.jobs) {
      const byId = new Map([...this.indexSessions().values()].map((s) => [s.id, s]));
      const dir = path.join(this.root, 'jobs');
      const jobs = [];
      for (const owner of fs.readdirSync(dir).sort()) {
        const file = JSON.parse(fs.readFileSync(path.join(dir, owner, 'scheduled-jobs.json'), 'utf8'));
        for (const job of file.jobs) {
          const session = byId.get(job.sessionId) || {};
          jobs.push({ ...job, sessionName: session.name || null, firstMessage: session.firstMessage || '' });
        }
      }
      this.jobs = jobs;
    }
    return { jobs: this.jobs };
  }

  list() {
    return { resident: [...this.workers.keys()] };
  }

  /** A worker for the session, started if needed; resolves once it has loaded the session. */
  worker(name) {
    const session = this.indexSessions().get(name);
    if (!session) return Promise.reject(new Error(`no session named ${name}`));
    const known = this.workers.get(session.id);
    if (known) return known.ready.then(() => ({ session, worker: known }));
    const child = spawn(process.execPath, [path.join(__dirname, 'worker.js'), session.file], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const worker = { child, waiting: [] };
    let buffer = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk) => {
      buffer += chunk;
      let end;
      while ((end = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 1);
        const next = worker.waiting.shift();
        if (next) next(JSON.parse(line));
      }
    });
    worker.ask = (message) =>
      new Promise((resolve) => {
        worker.waiting.push(resolve);
        if (message) child.stdin.write(`${JSON.stringify(message)}\n`);
      });
    worker.ready = worker.ask(null);
    this.workers.set(session.id, worker);
    return worker.ready.then(() => ({ session, worker }));
  }

  async open(name, emit) {
    const { session, worker } = await this.worker(name);
    emit({ kind: 'worker_ready', sessionId: session.id, pid: worker.child.pid });
    return { sessionId: session.id, sessionName: session.name, workerState: 'ready', workerPid: worker.child.pid };
  }

  async switchTo(name, emit) {
    const { session, worker } = await this.worker(name);
    const history = await worker.ask({ type: 'history' });
    emit({ kind: 'history', sessionId: session.id, messages: history.messages });
    return { sessionId: session.id, messages: history.messages.length };
  }

  stop() {
    for (const w of this.workers.values()) w.child.kill('SIGKILL');
  }
}

async function handle(catalog, command, emit) {
  switch (command.type) {
    case 'catalog':
      return catalog.catalog();
    case 'list':
      return catalog.list();
    case 'open':
      return catalog.open(command.name, emit);
    case 'switch':
      return catalog.switchTo(command.name, emit);
    default:
      throw new Error(`unknown command ${command.type}`);
  }
}

function serve(socketPath, root) {
  const catalog = new Catalog(root);
  try {
    fs.unlinkSync(socketPath);
  } catch {
    // no stale socket
  }
  const server = net.createServer((socket) => {
    const send = (message) => socket.write(`${JSON.stringify(message)}\n`);
    send({ type: 'hello', protocol: PROTOCOL, capabilities: ['catalog', 'switch'] });
    let buffer = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk) => {
      buffer += chunk;
      let end;
      while ((end = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 1);
        let envelope;
        try {
          envelope = JSON.parse(line);
        } catch (err) {
          send({ type: 'response', id: null, success: false, error: `not JSON: ${err.message}` });
          continue;
        }
        const { id, command } = envelope;
        if (envelope.type !== 'command' || !command) {
          send({ type: 'response', id, success: false, error: 'expected {type: "command", command}' });
          continue;
        }
        const emit = (event) => send({ type: 'event', event });
        Promise.resolve()
          .then(() => handle(catalog, command, emit))
          .then(
            (data) => send({ type: 'response', id, success: true, data }),
            (err) => send({ type: 'response', id, success: false, error: err.message }),
          );
      }
    });
    socket.on('error', () => {});
  });
  server.listen(socketPath);
  const stop = () => {
    catalog.stop();
    server.close();
    try {
      fs.unlinkSync(socketPath);
    } catch {
      // already gone
    }
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

function main(args) {
  const option = (name) => {
    const at = args.indexOf(name);
    return at >= 0 ? args[at + 1] : undefined;
  };
  const socketPath = option('--socket');
  if (!socketPath) throw new Error('usage: demo daemon --socket PATH [--root DIR]');
  serve(socketPath, option('--root') || path.join(os.homedir(), '.demo', 'catalog'));
}

module.exports = { main, Catalog, PROTOCOL };
