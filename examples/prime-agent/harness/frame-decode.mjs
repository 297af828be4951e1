#!/usr/bin/env node
// A stand-in for prime-agent's own scripts/benchmarks/frame-decode.mjs, the frame_decode bench (PrivateFrameDecoder on a 32 MiB frame in 8 KiB chunks).
// That bench is prime-agent's code and is not shipped with sandbench. The reference harness runs
// the default branch's copy of it against each side's build, so a pull request cannot change how
// it is measured: copy scripts/benchmarks/frame-decode.mjs of the base revision over this file. Until
// then the bench fails and records no number (a stand-in must not pass for a measurement).
console.error(
  "examples/prime-agent/harness/frame-decode.mjs is a stand-in: copy prime-agent's scripts/benchmarks/frame-decode.mjs (of the base revision) over it",
);
process.exit(1);
