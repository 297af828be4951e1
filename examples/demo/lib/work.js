'use strict';
// `demo work`: a fixed amount of CPU work, the same on every run, for benchmarks of a runtime
// command. lib/tuning.json can make it slower (work_extra_pct: spin for that share of the time
// since the process started, so the whole command takes that much longer) or make it burn more
// CPU without taking longer (work_cpu_burn_pct: a worker thread busy for that share of each
// 10 ms while the work runs, on another core). scripts/validity changes these in a commit.

const { performance } = require('perf_hooks');
const { Worker } = require('worker_threads');

const ROUNDS = 50_000_000;

const BURNER = `
const { workerData } = require('worker_threads');
const { performance } = require('perf_hooks');
const stop = new Int32Array(workerData.stop);
const busy = 10 * workerData.share;
while (Atomics.load(stop, 0) === 0) {
  const until = performance.now() + busy;
  while (performance.now() < until);
  Atomics.wait(stop, 0, 0, 10 - busy);
}
`;

function work(tuning) {
  const share = Math.min(Math.max(Number(tuning.work_cpu_burn_pct) || 0, 0), 90) / 100;
  let stop = null;
  if (share > 0) {
    stop = new SharedArrayBuffer(4);
    new Worker(BURNER, { eval: true, workerData: { stop, share } }).unref();
  }
  let x = 1;
  for (let i = 0; i < ROUNDS; i++) x = (Math.imul(x, 1103515245) + 12345) | 0;
  const extra = Math.max(Number(tuning.work_extra_pct) || 0, 0) / 100;
  if (extra > 0) {
    const until = performance.now() * (1 + extra);
    while (performance.now() < until) x ^= 1;
  }
  if (stop) Atomics.store(new Int32Array(stop), 0, 1);
  return x;
}

module.exports = { work };
