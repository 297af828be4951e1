#!/usr/bin/env node
// sandbench harness file for the demo's ui phase: writes the session fixtures from scratch, the
// same every time (ids are derived from names), before each trial. It belongs to the benchmark,
// not to the product, so it is shipped with the spec.
//   node ui-fixtures.js sessions   ~/.demo/sessions: 2 large, 300 medium, a root with 20 children
//   node ui-fixtures.js catalog    ~/.demo/catalog: 600 sessions, 13 with a paused scheduled job,
//                                  and a large cold target
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const path = require('path');

const STEP_TEXT = 'all checks passed\n'.repeat(4).trim().replace(/\n/g, ' / ');

function id(kind, index) {
  const hex = crypto.createHash('sha256').update(`demo-ui-bench/${kind}/${index}`).digest('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

function two(n) {
  return String(n).padStart(2, '0');
}

/** One session file: a header line, then `messages` message lines with head and tail markers. */
function writeSession(dir, kind, index, messages, parent) {
  const name = `ui-bench-${kind}-${two(index)}`;
  const sessionId = id(kind, index);
  const lines = [JSON.stringify({ type: 'session', version: 1, id: sessionId, name, parent: parent || null })];
  for (let m = 1; m <= messages; m++) {
    let text = m % 2 ? `step ${m}: run the checks` : `step ${m}: ${STEP_TEXT}`;
    if (m === 1) text = `ui-bench-head-${kind}-${two(index)} ${text}`;
    if (m === messages) text = `ui-bench-tail-${kind}-${two(index)} ${text}`;
    lines.push(JSON.stringify({ type: 'message', role: m % 2 ? 'user' : 'assistant', text }));
  }
  fs.writeFileSync(path.join(dir, `${sessionId}.jsonl`), `${lines.join('\n')}\n`);
  return { id: sessionId, name };
}

function fresh(dir) {
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

function sessions(home) {
  const dir = fresh(path.join(home, '.demo', 'sessions'));
  for (let i = 1; i <= 2; i++) writeSession(dir, 'large', i, 2000);
  for (let i = 1; i <= 300; i++) writeSession(dir, 'medium', i, 20);
  const root = writeSession(dir, 'root', 0, 50);
  for (let i = 1; i <= 20; i++) writeSession(dir, 'child', i, 20, root.id);
  return 323;
}

function catalog(home) {
  const base = fresh(path.join(home, '.demo', 'catalog'));
  const dir = fresh(path.join(base, 'sessions'));
  const jobs = fresh(path.join(base, 'jobs'));
  for (let i = 0; i < 600; i++) {
    const session = writeSession(dir, 'catalog', i, 10);
    if (i >= 1 && i <= 13) {
      const job = {
        id: `catalog-job-${i}`,
        status: 'paused',
        source: 'heartbeat',
        sessionId: session.id,
        prompt: 'benchmark fixture; must remain paused',
        runCount: 0,
        schedule: { every: '1h', ms: 3600000 },
        createdAt: '2000-01-01T00:00:00Z',
        updatedAt: '2000-01-01T00:00:00Z',
        dispatches: [],
      };
      fs.mkdirSync(path.join(jobs, session.id));
      fs.writeFileSync(path.join(jobs, session.id, 'scheduled-jobs.json'), `${JSON.stringify({ jobs: [job] })}\n`);
    }
  }
  writeSession(dir, 'cold', 0, 2000);
  return 601;
}

const kind = process.argv[2];
const write = { sessions, catalog }[kind];
if (!write) {
  console.error('usage: ui-fixtures.js sessions|catalog');
  process.exit(2);
}
const count = write(os.homedir());
console.log(`wrote ${count} ${kind} fixtures`);
