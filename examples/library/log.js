// A small durable log, written for sandbench's examples: records are appended and committed in
// rounds; a committed round is a delta, and every BASE_EVERY commits the log writes a base (its
// whole state) and reclaims the deltas before it. Reopening replays the delta chain since the
// last base. Three backends: memory (nothing durable), JSON lines (a base file and a deltas
// file) and node:sqlite (a base row and delta rows).
"use strict";

const fs = require("node:fs");
const path = require("node:path");

const BASE_EVERY = 64;

/** The state the log keeps: how many records and bytes, and a rolling checksum of them. */
function empty() {
  return { records: 0, bytes: 0, checksum: 0 };
}

function apply(state, delta) {
  state.records += delta.records;
  state.bytes += delta.bytes;
  state.checksum = (state.checksum * 31 + delta.checksum) % 2147483647;
}

function checksum(text) {
  let sum = 0;
  for (let i = 0; i < text.length; i += 7) sum = (sum * 33 + text.charCodeAt(i)) % 2147483647;
  return sum;
}

class MemoryStore {
  constructor() {
    this.base = null;
    this.deltas = [];
  }
  load() {
    return { base: this.base, deltas: this.deltas };
  }
  writeDelta(delta) {
    this.deltas.push(delta);
  }
  writeBase(state) {
    this.base = { ...state };
    this.deltas = [];
  }
  close() {}
}

class JsonlStore {
  constructor(dir) {
    fs.mkdirSync(dir, { recursive: true });
    this.basePath = path.join(dir, "base.json");
    this.deltaPath = path.join(dir, "deltas.jsonl");
    this.fd = fs.openSync(this.deltaPath, "a");
  }
  load() {
    const base = fs.existsSync(this.basePath) ? JSON.parse(fs.readFileSync(this.basePath, "utf8")) : null;
    const text = fs.existsSync(this.deltaPath) ? fs.readFileSync(this.deltaPath, "utf8") : "";
    const deltas = text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
    return { base, deltas };
  }
  writeDelta(delta) {
    fs.writeSync(this.fd, `${JSON.stringify(delta)}\n`);
    fs.fsyncSync(this.fd);
  }
  writeBase(state) {
    const tmp = `${this.basePath}.tmp`;
    fs.writeFileSync(tmp, JSON.stringify(state));
    fs.renameSync(tmp, this.basePath);
    fs.ftruncateSync(this.fd, 0);
    fs.fsyncSync(this.fd);
  }
  close() {
    fs.closeSync(this.fd);
  }
}

class SqliteStore {
  constructor(dir) {
    const { DatabaseSync } = require("node:sqlite");
    fs.mkdirSync(dir, { recursive: true });
    this.db = new DatabaseSync(path.join(dir, "log.sqlite"));
    this.db.exec("PRAGMA journal_mode = WAL");
    this.db.exec("CREATE TABLE IF NOT EXISTS base (id INTEGER PRIMARY KEY CHECK (id = 1), body TEXT NOT NULL)");
    this.db.exec("CREATE TABLE IF NOT EXISTS deltas (seq INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL)");
    this.insert = this.db.prepare("INSERT INTO deltas (body) VALUES (?)");
  }
  load() {
    const row = this.db.prepare("SELECT body FROM base WHERE id = 1").get();
    const deltas = this.db.prepare("SELECT body FROM deltas ORDER BY seq").all().map((r) => JSON.parse(r.body));
    return { base: row ? JSON.parse(row.body) : null, deltas };
  }
  writeDelta(delta) {
    this.insert.run(JSON.stringify(delta));
  }
  writeBase(state) {
    this.db.exec("BEGIN");
    this.db.prepare("INSERT OR REPLACE INTO base (id, body) VALUES (1, ?)").run(JSON.stringify(state));
    this.db.exec("DELETE FROM deltas");
    this.db.exec("COMMIT");
    this.db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  }
  close() {
    this.db.close();
  }
}

/** A log on `backend` in `dir`: open() replays what is stored; returns the log. */
class Log {
  constructor(backend, dir, memory) {
    this.store =
      backend === "memory" ? memory ?? new MemoryStore() : backend === "jsonl" ? new JsonlStore(dir) : new SqliteStore(dir);
    const { base, deltas } = this.store.load();
    this.state = base ? { ...base } : empty();
    for (const delta of deltas) apply(this.state, delta);
    this.replayed = deltas.length;
    this.round = empty();
    this.commits = 0;
  }
  append(text) {
    this.round.records += 1;
    this.round.bytes += text.length;
    this.round.checksum = (this.round.checksum * 31 + checksum(text)) % 2147483647;
  }
  /** Makes the round durable as a delta; every BASE_EVERY commits, a base. */
  commit() {
    this.store.writeDelta(this.round);
    apply(this.state, this.round);
    this.round = empty();
    this.commits += 1;
    if (this.commits % BASE_EVERY === 0) this.store.writeBase(this.state);
  }
  /** Writes a base and reclaims the deltas. */
  finish() {
    this.store.writeBase(this.state);
  }
  close() {
    this.store.close();
  }
}

module.exports = { Log, MemoryStore };
