"""The demo kernel: runs Python cells for the demo CLI, spoken to over JSON lines.

Requests (one JSON object per line on stdin):
  {"type": "execute", "id": "1", "code": "..."}
  {"type": "interrupt", "id": "<id of the running execute>"}
  {"type": "snapshot", "id": "2", "path": "..."}     (a path may start with ~/)
  {"type": "restore", "id": "3", "path": "..."}
  {"type": "shutdown"}
Events (stdout): ready, stdout, error, done. Standard library only.
"""

import contextlib
import io
import json
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback

PROTOCOL = 1
_out = os.fdopen(os.dup(1), "w", buffering=1)
_lock = threading.Lock()
# The running cell, and whether an interrupt may still raise in it (once per cell).
_running = {"id": None, "interruptible": False}


def on_interrupt(signum, frame):
    """SIGINT raises KeyboardInterrupt once in the running cell, and is ignored anywhere else
    (between cells, while a cell's outcome is reported, after a cell was already interrupted)."""
    if _running["interruptible"]:
        _running["interruptible"] = False
        raise KeyboardInterrupt


def emit(**event):
    line = json.dumps(event) + "\n"
    # An interrupt must not land in the middle of a write (a cut line, a wedged buffer): SIGINT
    # waits until the line is out, then interrupts whatever comes next.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with _lock:
            _out.write(line)
            _out.flush()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class Bash:
    def __init__(self, exit_code, output):
        self.exit_code = exit_code
        self.output = output


def bash(command):
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    return Bash(done.returncode, done.stdout + done.stderr)


class Stream(io.TextIOBase):
    """stdout of a cell: every write becomes a stdout event of that cell."""

    def __init__(self, cell_id):
        self.cell_id = cell_id

    def write(self, text):
        if text:
            emit(event="stdout", id=self.cell_id, text=text)
        return len(text)


namespace = {"bash": bash, "__name__": "__cell__"}


def execute(request):
    cell_id = request["id"]
    _running["id"] = cell_id
    try:
        _running["interruptible"] = True
        with contextlib.redirect_stdout(Stream(cell_id)):
            exec(compile(request["code"], f"<cell {cell_id}>", "exec"), namespace)
        # An interrupt that lands before this line still counts as one: the cell had not ended.
        _running["interruptible"] = False
        emit(event="done", id=cell_id, status="ok")
    except KeyboardInterrupt:
        emit(event="error", id=cell_id, ename="KeyboardInterrupt", evalue="")
        emit(event="done", id=cell_id, status="error")
    except BaseException as error:  # a cell may raise anything
        emit(event="error", id=cell_id, ename=type(error).__name__, evalue=str(error),
             traceback=traceback.format_exc(limit=5))
        emit(event="done", id=cell_id, status="error")
    finally:
        _running["interruptible"] = False
        _running["id"] = None


def interrupt(cell_id):
    """Interrupts the running cell `cell_id`, again and again until it took.

    A signal is handled by Python between bytecodes: one that arrives just before the cell enters
    a blocking call (its `time.sleep(60)`) is noted, but the call itself is not interrupted and
    the KeyboardInterrupt would wait for it to return. The signal is therefore repeated, backing
    off from 5 ms, until the cell took it or ended; repeats that find no interruptible cell are
    ignored by `on_interrupt`.
    """
    wait = 0.005
    deadline = time.monotonic() + 30
    while _running["id"] == cell_id and _running["interruptible"] and time.monotonic() < deadline:
        # To the main thread itself: a signal sent to the process may land on this reader
        # thread, and then the main thread's blocking call is not interrupted at all.
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        time.sleep(wait)
        wait = min(wait * 2, 0.5)


def snapshot(request):
    saved = {}
    for name, value in namespace.items():
        if name.startswith("_") or name in ("bash",) or callable(value):
            continue
        try:
            pickle.dumps(value)
        except Exception:
            continue
        saved[name] = value
    with open(os.path.expanduser(request["path"]), "wb") as f:
        pickle.dump(saved, f)
    emit(event="done", id=request["id"], status="ok", saved=sorted(saved))


def restore(request):
    with open(os.path.expanduser(request["path"]), "rb") as f:
        saved = pickle.load(f)
    namespace.update(saved)
    emit(event="done", id=request["id"], status="ok", restored=sorted(saved))


def reader(requests):
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
        except ValueError:
            emit(event="error", id=None, ename="ProtocolError", evalue="not JSON")
            continue
        if request.get("type") == "interrupt":
            if _running["id"] is not None and _running["id"] == request.get("id"):
                interrupt(request["id"])
            continue
        requests.put(request)
    requests.put({"type": "shutdown"})


def main():
    signal.signal(signal.SIGINT, on_interrupt)
    requests = queue.Queue()
    threading.Thread(target=reader, args=(requests,), daemon=True).start()
    emit(event="ready", protocol=PROTOCOL, python=sys.version.split()[0])
    handlers = {"execute": execute, "snapshot": snapshot, "restore": restore}
    while True:
        request = requests.get()
        kind = request.get("type")
        if kind == "shutdown":
            return
        handler = handlers.get(kind)
        if handler is None:
            emit(event="done", id=request.get("id"), status="error", error=f"unknown request {kind}")
            continue
        try:
            handler(request)
        except Exception as error:
            emit(event="done", id=request.get("id"), status="error", error=str(error))


if __name__ == "__main__":
    main()
