#!/usr/bin/env node
// The library's benchmark: `node bench.js rate BACKEND` writes records for RATE_MS, committing a
// round every few records (each commit's latency a sample), closes the log mid-round and times
// the replay of the round's delta chain on reopen, then finishes (a base, deltas reclaimed);
// `node bench.js throughput BACKEND` pushes the input in $SANDBENCH_KEEP/input.txt through the
// log. Figures are RESULT lines; the store is ~/store/BACKEND.
"use strict";

const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { Log, MemoryStore } = require("./log.js");

const RATE_MS = Number(process.env.RATE_MS ?? 300);
const RECORDS_PER_COMMIT = 8;
/** Commit latencies kept as samples (the first ones of the round): a bounded RESULT line. */
const MAX_COMMIT_SAMPLES = 2000;
const LINE = "The quick brown fox jumps over the lazy dog. Record";
/** Copies of each chunk the log encodes (a revision that doubles it halves the throughput). */
const ENCODE_COPIES = 1;

const [kind, backend] = process.argv.slice(2);
const dir = path.join(os.homedir(), "store", backend);
fs.rmSync(dir, { recursive: true, force: true });
fs.mkdirSync(dir, { recursive: true });

function rate() {
  const memory = new MemoryStore();
  let log = new Log(backend, dir, memory);
  const commits = [];
  let records = 0;
  const started = process.hrtime.bigint();
  const until = started + BigInt(RATE_MS) * 1_000_000n;
  while (process.hrtime.bigint() < until) {
    for (let i = 0; i < RECORDS_PER_COMMIT; i++) log.append(`${LINE} ${records++}`);
    const before = process.hrtime.bigint();
    log.commit();
    if (commits.length < MAX_COMMIT_SAMPLES) commits.push(Number(process.hrtime.bigint() - before) / 1e6);
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  // Mid-round: records appended but not committed are lost; the deltas since the base replay.
  log.append(`${LINE} uncommitted`);
  log.close();
  const reopened = process.hrtime.bigint();
  log = new Log(backend, dir, memory);
  const replayMs = Number(process.hrtime.bigint() - reopened) / 1e6;
  log.finish();
  log.close();
  const result = { ops_per_s: records / seconds, commit_ms: commits, replay_ms: replayMs };
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
}

function throughput() {
  const input = path.join(process.env.SANDBENCH_KEEP ?? ".", "input.txt");
  const log = new Log(backend, dir);
  const fd = fs.openSync(input, "r");
  const chunk = Buffer.alloc(1 << 16);
  let bytes = 0;
  const started = process.hrtime.bigint();
  for (;;) {
    const n = fs.readSync(fd, chunk, 0, chunk.length, null);
    if (n === 0) break;
    const text = chunk.toString("utf8", 0, n);
    for (let copy = 0; copy < ENCODE_COPIES; copy++) log.append(text);
    bytes += n;
    if ((bytes >> 16) % 16 === 0) log.commit();
  }
  log.commit();
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  fs.closeSync(fd);
  log.finish();
  log.close();
  process.stdout.write(`RESULT ${JSON.stringify({ throughput_mb_s: bytes / 1e6 / seconds })}\n`);
}

if (kind === "rate") rate();
else if (kind === "throughput") throughput();
else {
  process.stderr.write("usage: bench.js rate|throughput memory|jsonl|sqlite\n");
  process.exit(2);
}
