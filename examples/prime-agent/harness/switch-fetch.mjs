#!/usr/bin/env node
// A stand-in for prime-agent's own scripts/benchmarks/switch-fetch.mjs, the switch_fetch bench (full-history transfers in one warm session switch).
// That bench is prime-agent's code and is not shipped with sandbench. The reference harness runs
// the default branch's copy of it against each side's build, so a pull request cannot change how
// it is measured: copy scripts/benchmarks/switch-fetch.mjs of the base revision over this file. Until
// then the bench fails and records no number (a stand-in must not pass for a measurement).
console.error(
  "examples/prime-agent/harness/switch-fetch.mjs is a stand-in: copy prime-agent's scripts/benchmarks/switch-fetch.mjs (of the base revision) over it",
);
process.exit(1);
