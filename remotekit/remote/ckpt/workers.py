"""Checkpoint diagnostics: the worker process that checks files, and the pools that feed it.

Part of ``ckpt.py``. Files are checked in one worker process (``ckpt.py _worker``) running
``--jobs`` threads; a file that crashes the worker costs only itself (the files it had open
are checked again alone in a fresh one). When torch is imported here already (the agent
forked this step from its warm process), the worker is a fork of this process
(:class:`ForkedWorker`), not a new interpreter that would import torch again.
:class:`InlinePool` checks in this process.
"""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from ..protocol import EXIT_FAILED, EXIT_OK, emit, emit_line, flush
from .base import Fatal, on_torch, uses_torch
from .check import empty_record, meta_item, meta_record, scan_item
from .formats import allow_globals

torch = None  # this module's torch: set by import_torch() (discovery needs no torch)
uses_torch(globals())


# ------------------------------------------------------------------------------- workers


def _main_script():
    """ckpt.py, beside this package: the worker process runs it with ``_worker``."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ckpt.py")


def _cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class WorkerPool(object):
    """One worker process (this script's ``_worker`` mode) checking up to ``jobs`` files at a
    time on threads: one ``import torch``, and torch kernels and madvise release the GIL.

    Items go to the worker as JSON lines on its stdin; its records come back on stdout and
    are passed on as they arrive ("started" ones are kept: they say which files were open).
    The worker outlives one ``run`` (bisect asks one file at a time). When it dies (a crash in
    torch on a damaged file), each file it had open is checked again alone in a fresh worker,
    so only the file that kills a worker gets the error record; the rest continue.
    """

    DONE_TYPES = ("checkpoint", "meta")

    def __init__(self, jobs, opts):
        self.jobs = max(1, jobs)
        self.opts = opts
        self.proc = None
        self._proc_jobs = None
        self._died = None

    def _spawn(self, jobs):
        threads = max(1, _cpu_count() // jobs)
        options = self.opts.worker(jobs, threads)
        if "torch" in sys.modules and hasattr(os, "fork"):
            return ForkedWorker(options)
        argv = [sys.executable, _main_script(), *options.argv()]
        return subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True, bufsize=1
        )

    def run(self, items):
        """Check ``items`` (op "scan" or "meta"); returns their final records, in completion
        order, each passed on (emitted) as it arrives."""
        todo = sorted(items, key=lambda it: -int(it.get("bytes", 0)))  # largest first
        results = []
        while todo:
            done, suspects = self._batch(todo, self.jobs)
            results += done
            finished = set(r["path"] for r in done)
            for it in [it for it in todo if it["path"] in suspects]:
                alone, crashed = self._batch([it], 1)
                if crashed:
                    alone = [self._crash_record(it)]
                    emit(alone[0])
                results += alone
                finished.add(it["path"])
            todo = [it for it in todo if it["path"] not in finished]
        return results

    def _batch(self, items, jobs):
        """Send ``items`` to a worker; (records, paths open when the worker died)."""
        if self.proc is None or self.proc.poll() is not None or jobs != self._proc_jobs:
            self.close()
            self.proc = self._spawn(jobs)
            self._proc_jobs = jobs
        proc = self.proc
        pending = set(it["path"] for it in items)
        payload = "".join(json.dumps(it) + "\n" for it in items)

        def feed():
            try:
                proc.stdin.write(payload)
                proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass  # the worker died: the reader below sees it

        writer = threading.Thread(target=feed)
        writer.start()
        records, started = [], set()
        while pending:
            line = proc.stdout.readline()
            if not line:
                break
            line = line.rstrip("\n")
            try:
                rec = json.loads(line)
            except ValueError:
                sys.stderr.write(line + "\n")
                continue
            kind = rec.get("type") if isinstance(rec, dict) else None
            if kind == "started":
                started.add(rec.get("path"))
                continue
            if kind == "error":
                writer.join()
                raise Fatal(rec.get("message", "the worker failed"))
            emit_line(line)
            if kind in self.DONE_TYPES and rec.get("path") in pending:
                pending.discard(rec["path"])
                started.discard(rec["path"])
                records.append(rec)
        writer.join()
        if not pending:
            return records, set()
        self._died = proc.wait()
        self.proc = None
        crashed = started & pending
        if not crashed:
            raise Fatal(
                "the worker process exited (%s) before it checked anything; its stderr says why"
                % self._died
            )
        return records, crashed

    def _crash_record(self, item):
        code = self._died
        sig = " = signal %d" % -code if code is not None and code < 0 else ""
        reason = (
            "the worker process died (exit %s%s) while reading this file: it is damaged in a way "
            "that crashes torch" % (code, sig)
        )
        if item.get("op", "scan") == "scan":
            rec = empty_record(item["path"], None, item.get("bytes", 0))
            rec["error"] = reason
            return rec
        return meta_record(item["path"], reason)

    def close(self):
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ForkedWorker(object):
    """A worker forked from this process, with the Popen surface WorkerPool uses (stdin and
    stdout as line text, poll, wait, kill, returncode).

    Used when torch is imported here already: the fork has it too, where a new interpreter
    imports it again (seconds). It is a process of its own as a spawned worker is, so a file
    that crashes torch still kills only the worker; it keeps none of this process's files
    open (as close_fds), and its stdin and stdout are pipes to us alone.
    """

    def __init__(self, opts):
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        self.pid = os.fork()
        if not self.pid:
            _forked_worker(opts, in_r, out_w)
        os.close(in_r)
        os.close(out_w)
        self.stdin = io.open(in_w, "w", buffering=1, encoding="utf-8")
        self.stdout = io.open(out_r, "r", encoding="utf-8", errors="replace")
        self.returncode = None

    def poll(self):
        return self._wait(os.WNOHANG)

    def wait(self, timeout=None):
        if timeout is None:
            return self._wait(0)
        end = time.monotonic() + timeout
        while self._wait(os.WNOHANG) is None:
            if time.monotonic() > end:
                raise subprocess.TimeoutExpired("ckpt.py _worker (forked)", timeout)
            time.sleep(0.01)
        return self.returncode

    def _wait(self, flags):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid:
                if os.WIFSIGNALED(status):
                    self.returncode = -os.WTERMSIG(status)
                else:
                    self.returncode = os.WEXITSTATUS(status)
        return self.returncode

    def kill(self):
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass


_PARENT_STREAMS = []  # in a forked worker: this process's own, kept so they are never flushed


def _forked_worker(opts, stdin, stdout):
    """In the fork: ``stdin`` and ``stdout`` (pipe ends) as fds 0 and 1, every other fd above
    2 closed, then ``cmd_worker`` as the ``_worker`` command runs it; never returns."""
    code = EXIT_FAILED
    try:
        os.dup2(stdin, 0)
        os.dup2(stdout, 1)
        _close_fds_above(2)
        _PARENT_STREAMS.extend([sys.stdin, sys.stdout])
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), encoding="utf-8", line_buffering=True
        )
        code = cmd_worker(opts)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else EXIT_FAILED
    except BaseException as e:
        try:
            os.write(2, ("ckpt.py _worker (forked): %s: %s\n" % (type(e).__name__, e)).encode())
        except OSError:
            pass
    finally:
        os._exit(code)


def _close_fds_above(low):
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):
        fds = range(low + 1, 1024)
    for fd in fds:
        if fd > low:
            try:
                os.close(fd)
            except OSError:
                pass


class InlinePool(object):
    """The same interface as WorkerPool, checking in this process (when no file to re-run)."""

    def __init__(self, opts):
        self.opts = opts
        on_torch(lambda: allow_globals(opts.allow_globals))

    def run(self, items):
        out = []
        for it in items:
            rec = meta_item(it, self.opts) if it.get("op") == "meta" else scan_item(it, self.opts)
            emit(rec)
            out.append(rec)
        return out

    def close(self):
        pass


def make_pool(jobs, opts):
    if os.path.isfile(_main_script()):
        return WorkerPool(jobs, opts)
    if jobs > 1:
        emit(
            {
                "type": "warning",
                "message": "cannot locate this script to start workers: --jobs ignored",
            }
        )
    return InlinePool(opts)


def _torch_setup(opts):
    torch.set_num_threads(max(1, opts.threads))
    allow_globals(opts.allow_globals)


def cmd_worker(opts):
    """Check the items read from stdin on ``--jobs`` threads; "started" then the record."""
    # No PR_SET_PDEATHSIG: it fires when the spawning *thread* ends. A worker whose parent
    # died reads EOF on stdin and exits; the runner stops the whole process group anyway.
    # torch is imported by the first file that needs it (a safetensors-only scan never does)
    on_torch(lambda: _torch_setup(opts))
    q = queue.Queue()

    def work():
        while True:
            item = q.get()
            if item is None:
                return
            emit({"type": "started", "path": item["path"]})
            try:
                rec = meta_item(item, opts) if item.get("op") == "meta" else scan_item(item, opts)
            except Fatal as e:  # no torch here: the pool ends the command with this
                emit({"type": "error", "message": str(e)})
                continue
            emit(rec)

    threads = [threading.Thread(target=work) for _ in range(max(1, opts.jobs))]
    for t in threads:
        t.start()
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        if line.strip():
            q.put(json.loads(line))
    for _ in threads:
        q.put(None)
    for t in threads:
        t.join()
    # Every record is written and flushed: skip interpreter teardown, which with torch
    # loaded and large files mapped takes up to a second for nothing.
    flush()
    os._exit(EXIT_OK)
