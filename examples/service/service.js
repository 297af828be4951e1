#!/usr/bin/env node
// A JSON-lines runtime service, written for sandbench's examples: one request a line on stdin,
// one reply a line on stdout carrying the request's `requestId`. It keeps a ledger of decisions
// and their feedback, versioned by `stateGeneration` (each accepted request adds one), and
// persists it to a state file (`--state PATH`) that a restarted service restores.
//
//   node service.js --state ~/state/runtime-state.json
//   {"requestId": "d-0", "method": "decide", "generation": 0, "context": {"features": [1, 2]}}
//
// Methods: handshake, decide, feedback, inspect, snapshot. A request whose `generation` is ahead
// of the service's state is rejected (it was built from a reply the service never sent).
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const readline = require("node:readline");

/// Work per decision: rounds of a small scoring loop (a stand-in for a model's evaluation).
const SCORE_ROUNDS = 60000;
/// Every STALL_EVERY-th decision does STALL_FACTOR times the work (0: none does).
const STALL_EVERY = 0;
const STALL_FACTOR = 3;
/// Decisions kept pending at most (the ledger's capacity).
const CAPACITY = 1024;

const statePath = argument("--state") ?? path.join(process.env.HOME ?? ".", "runtime-state.json");
const state = restore(statePath);
let decisions = 0;

function argument(name) {
  const at = process.argv.indexOf(name);
  return at > 0 ? process.argv[at + 1] : undefined;
}

function restore(file) {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8"));
  } catch {
    return { stateGeneration: 0, pending: {}, completed: 0, rewards: 0 };
  }
}

function persist() {
  fs.mkdirSync(path.dirname(statePath), { recursive: true });
  const tmp = `${statePath}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(state));
  fs.renameSync(tmp, statePath);
}

function score(features, rounds) {
  let acc = 0;
  for (let i = 0; i < rounds; i++) acc = (acc * 31 + features[i % features.length] * 7 + i) % 1000003;
  return acc;
}

function decide(request) {
  decisions += 1;
  if (Object.keys(state.pending).length >= CAPACITY) return error("capacityExceeded", "the ledger is at capacity");
  const features = request.context?.features ?? [1];
  const stall = STALL_EVERY > 0 && decisions % STALL_EVERY === 0;
  const value = score(features, stall ? SCORE_ROUNDS * STALL_FACTOR : SCORE_ROUNDS);
  const decisionId = request.requestId;
  state.pending[decisionId] = { arm: value % 2 };
  state.stateGeneration += 1;
  return { kind: "result", decisionId, arm: value % 2 };
}

function feedback(request) {
  const pending = state.pending[request.decisionId];
  if (pending === undefined) return error("unknownDecision", `no pending decision ${request.decisionId}`);
  delete state.pending[request.decisionId];
  state.completed += 1;
  state.rewards += Number(request.reward ?? 0);
  state.stateGeneration += 1;
  return { kind: "result" };
}

function summary() {
  return { pendingDecisions: Object.keys(state.pending).length, completedDecisions: state.completed };
}

function error(code, message) {
  return { kind: "error", error: { code, message } };
}

function answer(request) {
  if (typeof request.generation === "number" && request.generation > state.stateGeneration) {
    return error("futureGeneration", `generation ${request.generation} is ahead of ${state.stateGeneration}`);
  }
  switch (request.method) {
    case "handshake":
      return { kind: "handshake", channel: "preview" };
    case "decide":
      return decide(request);
    case "feedback":
      return feedback(request);
    case "inspect":
      return { kind: "inspection", summary: summary() };
    case "snapshot":
      persist();
      return { kind: "snapshot", bytes: fs.statSync(statePath).size };
    default:
      return error("unknownMethod", `unknown method ${JSON.stringify(request.method)}`);
  }
}

const input = readline.createInterface({ input: process.stdin });
input.on("line", (line) => {
  if (line.trim() === "") return;
  let request;
  try {
    request = JSON.parse(line);
  } catch {
    process.stdout.write(`${JSON.stringify({ requestId: null, response: error("badRequest", "not JSON") })}\n`);
    return;
  }
  const response = answer(request);
  process.stdout.write(
    `${JSON.stringify({ requestId: request.requestId, stateGeneration: state.stateGeneration, response })}\n`,
  );
});
input.on("close", () => {
  persist();
  process.exit(0);
});
