#!/usr/bin/env node
// Writes the throughput input, INPUT_MB megabytes of unique lines, to $SANDBENCH_KEEP/input.txt.
"use strict";

const fs = require("node:fs");
const path = require("node:path");

const size = Number(process.env.INPUT_MB ?? 64) * 1e6;
const out = fs.openSync(path.join(process.env.SANDBENCH_KEEP ?? ".", "input.txt"), "w");
let written = 0;
for (let index = 0; written < size; ) {
  let block = "";
  while (block.length < 1 << 20) block += `Line ${index++}: the quick brown fox jumps over the lazy dog ${(index * 7919).toString(16)}\n`;
  fs.writeSync(out, block);
  written += block.length;
}
fs.closeSync(out);
