#!/usr/bin/env python3
"""sandbench harness file for prime-agent's ui phase: writes the reference harness's session
fixtures from scratch (reference-harness.md §2.5), as the benchmark user, before each trial.

    python3 ui-fixtures.py sessions   3 large (the third 16,000 steps), 150 medium, a chain root
                                      with 40 fan-out children and a 6-deep subagent chain, and
                                      their spawn ledger
    python3 ui-fixtures.py catalog    2,300 sessions: a root, 2,298 children under its artifacts
                                      (13 owning a paused scheduled job), an unrelated cold
                                      target; and their spawn ledger

Ids are uuid5 of fixed names, so the spec can address sessions by id; timestamps step by one
second from 2000-01-01Z. sandbench syncs the disk after this script, before any timed window.
"""

import hashlib
import json
import os
import shutil
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

NAMESPACE = uuid.UUID("b0d5f4a1-6d64-4bf8-9d7a-2f4f0a9c1e10")
EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
MODEL = {"provider": "prime-inference", "modelId": "internal/glm-5.3-fast"}
USAGE = {
    "input": 100,
    "output": 50,
    "cacheRead": 0,
    "cacheWrite": 0,
    "totalTokens": 150,
    "cost": {"input": 0.0001, "output": 0.0001, "cacheRead": 0, "cacheWrite": 0, "total": 0.0002},
}
TOOL_OUTPUT = "all checks passed\n" * 60


def ident(kind, index):
    return str(uuid.uuid5(NAMESPACE, f"prime-agent-ui-bench/{kind}/{index}"))


def name(kind, index):
    return f"ui-bench-{kind}-{index:02d}"


def stamp(seconds):
    return (EPOCH + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Transcript:
    """Entries of one session, each chained to the previous by parentId, one second apart."""

    def __init__(self, session_id, cwd, depth):
        self.key = session_id.replace("-", "")[:8]
        self.clock = 0
        self.parent = None
        self.entries = [
            {"type": "session", "version": 3, "id": session_id, "timestamp": stamp(0), "cwd": str(cwd), "rlmDepth": depth}
        ]

    def add(self, suffix, body):
        self.clock += 1
        entry = {"id": f"{self.key}{suffix}", "parentId": self.parent, "timestamp": stamp(self.clock)}
        entry.update(body)
        self.parent = entry["id"]
        self.entries.append(entry)

    def text(self):
        return "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in self.entries)


def transcript(label, session_id, steps, cwd, depth=0, tail=None):
    t = Transcript(session_id, cwd, depth)
    t.add("n", {"type": "session_info", "name": label})
    t.add("m", {"type": "model_change", **MODEL})
    for step in range(steps):
        last = step == steps - 1
        ask = f"Please continue task {label} step {step}: review the module, run the checks, and summarize."
        t.add(f"u{step}", {"type": "message", "message": {"role": "user", "timestamp": 0, "content": ask}})
        answer = f"Finished all steps. {tail}" if last and tail else f"Working on {label} step {step}; the checks pass."
        content = [
            {"type": "thinking", "thinking": f"Step {step} for {label}: check the invariants, then run the suite."},
            {"type": "text", "text": answer},
        ]
        if not last:
            content.append({"type": "toolCall", "id": f"call-{step}", "name": "ipython", "arguments": {"code": "pass"}})
        reply = {
            "role": "assistant",
            "timestamp": 0,
            "content": content,
            "api": "responses",
            "provider": MODEL["provider"],
            "model": MODEL["modelId"],
            "usage": USAGE,
            "stopReason": "stop" if last else "toolUse",
        }
        t.add(f"a{step}", {"type": "message", "message": reply})
        if not last:
            result = {
                "role": "toolResult",
                "toolCallId": f"call-{step}",
                "toolName": "ipython",
                "content": [{"type": "text", "text": TOOL_OUTPUT}],
                "isError": False,
                "timestamp": 0,
            }
            t.add(f"t{step}", {"type": "message", "message": result})
    return t.text()


def fresh(agent):
    for folder in ("sessions", "session-artifacts", "session-leases"):
        shutil.rmtree(agent / folder, ignore_errors=True)
    sessions = agent / "sessions"
    sessions.mkdir(parents=True)
    return sessions


def write_ledger(agent, sessions, edges):
    real = os.path.realpath(sessions)
    ledger = agent / "rlm-ledger" / (hashlib.sha256(real.encode()).hexdigest()[:16] + ".jsonl")
    ledger.parent.mkdir(parents=True, exist_ok=True)
    records = [{"v": 1, "op": "meta", "at": stamp(0), "sessionsDir": real}]
    records += [{"v": 1, "op": "spawn", "at": stamp(0), **edge} for edge in edges]
    ledger.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))


def sessions_fixture(agent, cwd):
    sessions = fresh(agent)

    def write(kind, index, steps, depth=0, tail=False):
        path = sessions / f"{ident(kind, index)}.jsonl"
        marker = f"ui-bench-tail-{kind}-{index:02d}" if tail else None
        path.write_text(transcript(name(kind, index), ident(kind, index), steps, cwd, depth, marker))
        return path

    for index in (1, 2, 3):
        write("large", index, 16000 if index == 3 else 2000, tail=True)
    for index in range(1, 151):
        write("medium", index, 120)
    root = write("root", 0, 400, tail=True)
    edges = []
    for index in range(1, 41):
        child = write("fan", index, 20, depth=1)
        edges.append({"childId": ident("fan", index), "parent": str(root), "child": str(child), "depth": 1, "name": name("fan", index)})
    parent = root
    for depth in range(1, 7):
        child = write("sub", depth, 400, depth=depth, tail=True)
        edges.append({"childId": ident("sub", depth), "parent": str(parent), "child": str(child), "depth": depth, "name": name("sub", depth)})
        parent = child
    write_ledger(agent, sessions, edges)
    return 3 + 150 + 1 + 40 + 6


def catalog_fixture(agent, cwd):
    sessions = fresh(agent)
    root_id = ident("catalog", 0)
    children = agent / "session-artifacts" / root_id / "children"
    children.mkdir(parents=True)
    root = sessions / f"{root_id}.jsonl"
    edges = []
    count = 2300
    for index in range(count):
        cold = index == count - 1
        session_id = ident("catalog", index)
        top = index == 0 or cold
        path = (sessions if top else children) / f"{session_id}.jsonl"
        path.write_text(transcript(name("catalog", index), session_id, 1 if cold else 64, cwd, 0 if top else 1))
        if not top:
            edges.append({"childId": session_id, "parent": str(root.resolve()), "child": str(path.resolve()), "depth": 1, "name": name("catalog", index)})
        if 1 <= index <= 13:
            owner = path.parent.parent / "session-artifacts" / session_id
            owner.mkdir(parents=True)
            job = {
                "id": f"catalog-job-{index}",
                "status": "paused",
                "source": "heartbeat",
                "runtimeKind": "subagent",
                "activeSessionId": session_id,
                "sessionId": session_id,
                "sessionFile": str(path.resolve()),
                "cwd": str(cwd),
                "prompt": "benchmark fixture; must remain paused",
                "runCount": 0,
                "schedule": {"kind": "interval", "expression": "every 1h", "intervalMs": 3600000},
                "createdAt": stamp(0),
                "updatedAt": stamp(0),
            }
            (owner / "scheduled-jobs.json").write_text(json.dumps({"jobs": [job], "dispatches": []}) + "\n")
    write_ledger(agent, sessions, edges)
    return count


def main():
    kinds = {"sessions": sessions_fixture, "catalog": catalog_fixture}
    if len(sys.argv) != 2 or sys.argv[1] not in kinds:
        sys.exit("usage: ui-fixtures.py sessions|catalog")
    home = Path.home()
    written = kinds[sys.argv[1]](home / ".prime" / "agent", home / "workspace")
    print(f"wrote {written} {sys.argv[1]} fixtures")


if __name__ == "__main__":
    main()
