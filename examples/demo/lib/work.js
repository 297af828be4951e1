'use strict';
// `demo work`: a fixed amount of CPU work, the same on every run, for benchmarks of a runtime
// command. lib/tuning.json can make it slower (work_extra_pct: spin for that share of the time
// since the process started, so the whole command takes that much longer) or make it burn more
// CPU without taking longer (work_cpu_burn_pct: that share of the command's CPU time burnt
// on another core while the work runs), or do more of the same work (work_rounds_pct: that
// many more rounds: more instructions, the instruction lens's injected change). scripts/validity
// changes these in a commit.

const crypto = require('crypto');
const { performance } = require('perf_hooks');

const ROUNDS = 50_000_000;
// PBKDF2-SHA256 iterations that take as much CPU time as the whole `demo work` command (about
// 140 ms on the 2.3 GHz machine this was written on: 2,500 iterations a millisecond).
const BURN_ITERATIONS = 700_000;

function work(tuning) {
  const share = Math.min(Math.max(Number(tuning.work_cpu_burn_pct) || 0, 0), 90) / 100;
  const rounds = Math.round(ROUNDS * (1 + Math.max(Number(tuning.work_rounds_pct) || 0, 0) / 100));
  let x = spin(1, ROUNDS / 10);
  if (share > 0) {
    // Runs on libuv's thread pool, on the other core, while the rest of the loop runs: the
    // process spends that much more CPU time, and the main thread only queues the job, so the
    // wall time stays the same (the job ends well before the loop does). Queued once the loop
    // is compiled, so it does not delay the compiler's thread either.
    crypto.pbkdf2('demo', 'work', Math.round(share * BURN_ITERATIONS), 32, 'sha256', () => {});
  }
  x = spin(x, rounds - ROUNDS / 10);
  const extra = Math.max(Number(tuning.work_extra_pct) || 0, 0) / 100;
  if (extra > 0) {
    const until = performance.now() * (1 + extra);
    while (performance.now() < until) x ^= 1;
  }
  return x;
}

function spin(x, rounds) {
  for (let i = 0; i < rounds; i++) x = (Math.imul(x, 1103515245) + 12345) | 0;
  return x;
}

module.exports = { work };
