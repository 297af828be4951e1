'use strict';
// A product-side benchmark script: sandbench collects its RESULT lines as metrics.
const { performance } = require('perf_hooks');

const rows = [];
for (let i = 0; i < 20000; i++) rows.push({ id: i, name: `row ${i}`, tags: ['a', 'b', String(i % 7)] });
const text = JSON.stringify(rows);
const start = performance.now();
let parsed;
for (let i = 0; i < 10; i++) parsed = JSON.parse(text);
const parseMs = (performance.now() - start) / 10;
console.log(`parsed ${parsed.length} rows`);
console.log(`RESULT ${JSON.stringify({ parse_ms: parseMs })}`);
