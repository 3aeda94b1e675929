"""remotekit's run supervisor: shipped THERE, beside runner.py and protocol.py.

A **run** is a command started with ``detach=True`` that outlives its step and its connection.
Each run has a record folder (0700; its files 0600)::

    <runs dir>/<id>/run.json     id, host, command (masked when it leaves the host), cwd,
                                 started, the supervisor's pid and start time, the
                                 command's pid, the shipped files' dir; a batch job's
                                 ``job`` id and ``batch`` (how to ask about it, cancel it)
                   output.log    stdout and stderr as they came, interleaved, byte for byte
                                 (what ``logs`` shows; offsets into it resume a follow)
                   stdout.log    stdout alone
                   stderr.log    stderr alone (so the two can be told apart)
                   exit.json     when it ended: code, ended, reason (exit | stopped), and
                                 any leftovers it stopped; written whole (temp + rename);
                                 for a batch job whose supervisor is gone, by whoever
                                 first saw the job end (``by``: the tool that said so)
                   stop.json     a stop request (its grace), read by the supervisor on TERM

The runs dir is ``--runs-dir`` (hosts.yaml ``runs_dir:``), else ``$XDG_STATE_HOME/remotekit/
runs``, else ``~/.local/state/remotekit/runs``: not a tmpfs, so a record survives a restart.

Modes (``python supervisor.py MODE ...``)::

    start ID [--runs-dir D] [--host H] [--grace S] [--script NAME] [--batch JSON] -- ARGV...
        run by the runner as a detached step, so it is in its own session and no step's stop
        reaches it. It becomes a child subreaper (orphans of the run re-parent to it), starts
        the command in its own session, reports {"id", "pid", "log"} (or {"error"}) as one
        JSON line on the file descriptor $REMOTEKIT_REPORT_FD, copies the command's output
        into the logs, and records the exit. TERM/HUP/INT to it stop the run's whole tree
        (TERM, KILL after the grace); so does the end of the main process (leftovers).
        A batch job (a Slurm hop; --batch: the fields of ``layers.core.Batch`` but ``submit``):
        ARGV prints the job's id as its first stdout line (recorded before the report), then
        waits for the job (sbatch --parsable --wait); it gets ``log_option`` + the log's path
        (the job appends its output there); a stop cancels the job by its id first. When
        the supervisor is gone, the job's own state (``queue``, then ``accounting``) says
        whether the run still runs, and how it ended.
    list [ID]                            one ``run`` record per run (or run ID), then ``done``
    logs ID [--offset N | --tail N] [--follow] [--stream output|stdout|stderr]
        ``data`` records {"at": offset, "bytes": the bytes as a latin-1 string} from there;
        with --follow until the run ended and every byte was sent (``beat`` records while it
        is quiet); ``done`` carries the run's state and exit code and the offset reached
    wait ID                              until the run ends; its ``run`` record
    stop ID [--grace S]                  stop the tree; the ``run`` record afterwards
    rm ID                                remove a finished run's record (and shipped dir)
    rm --finished [--older-than S]       remove every run that ended at least S s ago

Standard library only, Python >= 3.8; records as :mod:`protocol` writes them.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import protocol
import runner

ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
READ = 512 << 10  # bytes read at once for data records
MAX_RECORD = 960 << 10  # a record line stays below the engine's 1 MiB line (else it is cut)
POLL_S = 0.05  # how often a follow looks for new bytes
JOB_ASK_S = 5.0  # a batch job's state is asked at most this often (the scheduler is shared)
BEAT_S = 1.0  # a quiet follow says it is alive this often
DEFAULT_GRACE = 10.0
STREAMS = ("output", "stdout", "stderr")


# -- the record folder -------------------------------------------------------------------------


def runs_dir(given):
    if given:
        return os.path.abspath(os.path.expanduser(given))
    state = os.environ.get("XDG_STATE_HOME")
    if not state:
        home = os.environ.get("HOME")
        if not home:
            import pwd

            home = pwd.getpwuid(os.getuid()).pw_dir
        state = os.path.join(home, ".local", "state")
    return os.path.join(state, "remotekit", "runs")


def write_json(path, data):
    """``data`` as ``path``, whole or not at all (a temp file beside it, then rename)."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def start_ticks(pid):
    """The process's start time (clock ticks since boot), or None when it is gone: with the
    pid, it tells the supervisor from a later process that got the same pid."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def alive(proc):
    return bool(proc) and proc.get("pid") and start_ticks(proc["pid"]) == proc.get("start")


def state_of(folder, record):
    """(state, exit.json's data or None) of a run. Without its supervisor a batch run is
    what its job is: running while the job has not ended; once it has, its end is written
    as the run's exit.json (the scheduler forgets jobs); lost when no tool knows the job."""
    ended = read_json(os.path.join(folder, "exit.json"))
    if ended is not None:
        return ("stopped" if ended.get("reason") == "stopped" else "exited"), ended
    if alive(record.get("supervisor")):
        return "running", None
    if record.get("job"):
        answer = job_state(record)
        if answer is None:
            return "running", None
        if answer != "unknown":
            if read_json(os.path.join(folder, "exit.json")) is None:  # not its supervisor's
                write_json(os.path.join(folder, "exit.json"), answer)
            return state_of(folder, record)
    return "lost", None


def info(folder):
    """A run's ``run`` record, or None when ``folder`` holds none."""
    record = read_json(os.path.join(folder, "run.json"))
    if not isinstance(record, dict):
        return None
    state, ended = state_of(folder, record)
    out = dict(record)
    out.update(
        {
            "type": "run",
            "state": state,
            "exit_code": (ended or {}).get("code"),
            "ended": (ended or {}).get("ended"),
            "stopped": (ended or {}).get("stopped") or [],
            "log": os.path.join(folder, "output.log"),
            "command": protocol.mask_argv(record.get("command") or []),
        }
    )
    return out


def find(args):
    """The folder of run ``args.id``, or a ``done`` with an error (exit 2) and None."""
    if not ID_RE.match(args.id):
        return None, protocol.fail(args.mode, "not a run id: %r" % args.id)
    folder = os.path.join(runs_dir(args.runs_dir), args.id)
    if info(folder) is None:
        return None, protocol.fail(
            args.mode, "no run %s in %s" % (args.id, os.path.dirname(folder))
        )
    return folder, 0


# -- a batch job's own state -------------------------------------------------------------------

ASKED = {}  # job id -> (when, answer): one process asks the scheduler at most every JOB_ASK_S


def job_state(record, fresh=False):
    """What the scheduler says of a run's batch job: None while it has not ended, else
    {"reason", "code", "ended", "by"}; "unknown" when no tool knows the job (any more)."""
    job, batch = str(record["job"]), record.get("batch") or {}
    when, answer = ASKED.get(job, (None, None))
    if fresh or when is None or time.monotonic() - when >= JOB_ASK_S:
        answer = ask_queue(job, batch)
        if answer == "unknown" and batch.get("accounting"):
            answer = ask_accounting(job, batch)
        ASKED[job] = (time.monotonic(), answer)
    return answer


def tool_says(argv):
    """(exit code, stdout, stderr) of a scheduler's tool; code None when it could not run."""
    try:
        r = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return None, "", str(e)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def ask_queue(job, batch):
    """``queue`` prints STATE STATUS END (STATUS: a wait status) while the scheduler holds
    the job: an ended one too, for a while. A scheduler that does not answer (slurmctld
    restarting) leaves the run running: its job most likely is, and a follow goes on."""
    if not batch.get("queue"):
        return "unknown"
    code, out, err = tool_says(list(batch["queue"]) + [job])
    forgotten = batch.get("forgotten")
    if code is not None and code != 0 and not (forgotten and forgotten in err):
        return None
    words = out.split() if code == 0 else []
    if len(words) < 2:
        return "unknown"
    state, status = words[0], words[1]
    if state in (batch.get("live") or ()):
        return None
    try:
        status = int(status)
    except ValueError:
        return "unknown"
    code = 128 + (status & 0x7F) if status & 0x7F else status >> 8
    return ended_as(state, code, words[2] if len(words) > 2 else "", batch, "queue")


def ask_accounting(job, batch):
    """``accounting`` prints STATE|CODE:SIGNAL|END, the job's allocation first."""
    code, out, _ = tool_says(list(batch["accounting"]) + [job])
    lines = [ln.split("|") for ln in out.splitlines() if ln.count("|") >= 2] if code == 0 else []
    if not lines:
        return "unknown"
    state, code, end = lines[0][0], lines[0][1], lines[0][2]
    state = (state.split() or [""])[0]  # "CANCELLED by 1000"
    if state in (batch.get("live") or ()):
        return None
    try:
        exit_code, signum = (int(x) for x in code.split(":"))
    except ValueError:
        return "unknown"
    return ended_as(state, 128 + signum if signum else exit_code, end, batch, "accounting")


def ended_as(state, code, end, batch, by):
    try:
        ended = time.mktime(time.strptime(end, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:  # "Unknown", "N/A"
        ended = time.time()
    reason = "stopped" if state in (batch.get("cancelled") or ()) else "exit"
    return {
        "reason": reason,
        "code": code,
        "ended": ended,
        "stopped": [],
        "by": by,
        "job_state": state,
    }


# -- start: the supervisor ---------------------------------------------------------------------


class Supervisor(object):
    def __init__(self, args):
        self.args = args
        self.folder = os.path.join(runs_dir(args.runs_dir), args.id)
        self.stopping = []
        self.lock = threading.Lock()
        # the runner waits on this pipe for one line; the command must not see its number
        self.report_fd = int(os.environ.pop("REMOTEKIT_REPORT_FD", "-1"))
        self.job = None  # a batch job's id, once its submitter said it

    def report(self, data):
        fd, self.report_fd = self.report_fd, -1
        if fd >= 0:
            try:
                os.write(fd, (json.dumps(data) + "\n").encode())
            except OSError:
                pass  # the step gave up waiting: the run goes on, recorded
            finally:
                os.close(fd)

    def run(self):
        os.umask(0o077)
        try:
            os.makedirs(os.path.dirname(self.folder), 0o700, exist_ok=True)
            os.mkdir(self.folder, 0o700)
            files = [self.open(n) for n in STREAMS]
        except OSError as e:
            self.report({"error": "cannot make the run's record %s: %s" % (self.folder, e)})
            return 1
        runner.become_subreaper()
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, lambda signum, frame: self.stopping.append(signum))
        child, pipes = self.spawn()
        if child is None:
            return 1
        record = {
            "id": self.args.id,
            "host": self.args.host,
            "command": self.args.display or self.args.argv,
            "cwd": os.getcwd(),
            "started": time.time(),
            "supervisor": {"pid": os.getpid(), "start": start_ticks(os.getpid())},
            "pid": child.pid,
            "pid_start": start_ticks(child.pid),
            "dir": os.environ.get("REMOTEKIT_DIR") or None,
        }
        write_json(os.path.join(self.folder, "run.json"), record)
        copiers = [self.copy(pipes[1], files[0], files[2])]
        if self.args.batch:
            self.job = self.job_id(pipes[0], files[0], files[1])
            record.update({"job": self.job, "batch": self.args.batch})
            write_json(os.path.join(self.folder, "run.json"), record)
        copiers.append(self.copy(pipes[0], files[0], files[1]))
        log = os.path.join(self.folder, "output.log")
        self.report({"id": self.args.id, "pid": child.pid, "log": log})
        self.finish(child, copiers)
        return 0

    def open(self, stream):
        path = os.path.join(self.folder, stream + ".log")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        return os.fdopen(fd, "wb", buffering=0)

    def job_id(self, src, combined, own):
        """A batch submitter's first stdout line: the job's id (``ID`` or ``ID;CLUSTER``),
        None when it ended without one (its words, on stderr, are in the log). What came
        after that line goes to the logs."""
        data = b""
        while b"\n" not in data:
            try:
                b = os.read(src, 1 << 16)
            except OSError:
                break
            if not b:
                break
            data += b
        line, _, rest = data.partition(b"\n")
        job = line.decode("utf-8", "replace").strip().split(";")[0]
        if not ID_RE.match(job):
            job, rest = None, data
        if rest:
            own.write(rest)
            combined.write(rest)
        return job

    def spawn(self):
        argv = self.args.argv
        if self.args.batch:  # a batch system: the job writes the log itself
            log = os.path.join(self.folder, "output.log")
            argv = [argv[0], self.args.batch["log_option"] + log] + argv[1:]
        if self.args.script:
            where = os.environ.get("REMOTEKIT_DIR", "")
            argv = [sys.executable, "-u", os.path.join(where, self.args.script)] + argv
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            child = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w, start_new_session=True
            )
        except OSError as e:
            why = "command not found" if isinstance(e, FileNotFoundError) else str(e)
            shutil.rmtree(self.folder, ignore_errors=True)
            self.report(
                {"error": "%s: %s" % (why, argv[0]), "code": 127 if "found" in why else 126}
            )
            return None, None
        finally:
            os.close(out_w)
            os.close(err_w)
        return child, (out_r, err_r)

    def copy(self, src, combined, own):
        def pump():
            while True:
                try:
                    b = os.read(src, 1 << 16)
                except OSError:
                    break
                if not b:
                    break
                with self.lock:  # one chunk lands whole in both files, in the same order
                    own.write(b)
                    combined.write(b)
            os.close(src)

        t = threading.Thread(target=pump)
        t.daemon = True
        t.start()
        return t

    def finish(self, child, copiers):
        done = threading.Event()

        def wait():
            child.wait()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        beat = 0
        while child.returncode is None and not self.stopping:
            done.wait(0.25)
            beat += 1
            if beat % 8 == 0:
                runner.reap_others(child)
        reason = "stopped" if self.stopping else "exit"
        data = {"reason": reason, "stopped": [], "running": []}
        if self.stopping:
            cancel_job(self.job, self.args.batch)
        if self.stopping or runner.alive(child):
            data["stopped"], data["running"] = runner.stop_tree(child, self.grace())
        child.wait()
        for t in copiers:
            t.join(2.0)
        code = child.returncode
        data["code"] = 128 - code if code < 0 else code
        data["ended"] = time.time()
        write_json(os.path.join(self.folder, "exit.json"), data)

    def grace(self):
        asked = read_json(os.path.join(self.folder, "stop.json")) or {}
        grace = asked.get("grace")
        return float(grace if isinstance(grace, (int, float)) else self.args.grace)


# -- the other modes ---------------------------------------------------------------------------


def every_run(args):
    """(folder, record) of each run in the runs dir (only run ``args.id`` when given)."""
    top = runs_dir(args.runs_dir)
    try:
        names = sorted(os.listdir(top))
    except OSError:
        names = []
    for name in names:
        if args.id and name != args.id:
            continue
        rec = info(os.path.join(top, name))
        if rec is not None:
            yield os.path.join(top, name), rec


def do_list(args):
    count = 0
    for _, rec in every_run(args):
        protocol.emit(rec)
        count += 1
    return protocol.finish("list", 0, runs=count, runs_dir=runs_dir(args.runs_dir))


def tail_offset(path, lines):
    """The offset where the last ``lines`` lines of ``path`` begin."""
    with open(path, "rb") as f:
        end = f.seek(0, 2)
        at, seen = end, 0
        while at > 0:
            step = min(1 << 16, at)
            f.seek(at - step)
            block = f.read(step)
            if at == end and block.endswith(b"\n"):
                block = block[:-1]  # the last line's own newline
            i = len(block)
            while True:
                i = block.rfind(b"\n", 0, i)
                if i < 0:
                    break
                seen += 1
                if seen >= lines:
                    return at - step + i + 1
            at -= step
        return 0


def send(at, b):
    """``b`` (read at offset ``at``) as ``data`` records. latin-1 maps each byte to one code
    point and JSON escapes the few that need it, so text travels nearly 1:1 (base64 cost 2.4x
    the time here); binary bytes grow up to 6x, so a long record is sent as two halves."""
    line = '{"type":"data","at":%d,"bytes":%s}' % (at, json.dumps(b.decode("latin-1")))
    if len(line) <= MAX_RECORD or len(b) < 2:
        protocol.emit_line(line)
        return
    half = len(b) // 2
    send(at, b[:half])
    send(at + half, b[half:])


def ended_now(folder):
    rec = info(folder)
    return rec is None or rec["state"] != "running"


def do_logs(args, folder):
    path = os.path.join(folder, args.stream + ".log")
    offset = args.offset
    if args.tail is not None and offset is None:
        offset = tail_offset(path, args.tail) if args.tail > 0 else os.path.getsize(path)
    offset = offset or 0
    protocol.emit({"type": "start", "at": offset})
    with open(path, "rb") as f:
        f.seek(offset)
        quiet_since = time.monotonic()
        while True:
            ended = ended_now(folder)  # before reading: what was there at the end is all sent
            b = f.read(READ)
            if b:
                send(offset, b)
                offset += len(b)
                quiet_since = time.monotonic()
                continue
            if ended or not args.follow:
                break
            if time.monotonic() - quiet_since >= BEAT_S:
                protocol.emit({"type": "beat", "at": offset})
                quiet_since = time.monotonic()
            time.sleep(POLL_S)
    rec = info(folder) or {}
    return protocol.finish(
        "logs", 0, offset=offset, state=rec.get("state"), run_exit_code=rec.get("exit_code")
    )


def do_wait(args, folder):
    while not ended_now(folder):
        time.sleep(0.25)
    protocol.emit(info(folder))
    return protocol.finish("wait", 0)


def do_stop(args, folder):
    rec = info(folder)
    if rec["state"] == "running" and alive(rec.get("supervisor")):
        write_json(os.path.join(folder, "stop.json"), {"grace": args.grace})
        try:
            os.kill(rec["supervisor"]["pid"], signal.SIGTERM)
        except OSError:
            pass
        end = time.monotonic() + args.grace + 10.0
        while not ended_now(folder) and time.monotonic() < end:
            time.sleep(0.05)
    elif rec["state"] in ("running", "lost"):  # running: a batch job, without its supervisor
        stop_orphan(folder, rec, args.grace)
    protocol.emit(info(folder))
    return protocol.finish("stop", 0)


def cancel_job(job, batch):
    """Cancel a run's batch job by its id (``scancel ID``), if it has one."""
    if not job or not batch or not batch.get("cancel"):
        return
    argv = list(batch["cancel"]) + [job]
    try:
        subprocess.run(argv, stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        sys.stderr.write("remotekit: %s failed: %s\n" % (argv[0], e))


def stop_orphan(folder, rec, grace):
    """A run whose supervisor is gone (lost, or a batch job that runs on without it): its
    job is cancelled, its process group, if that still runs, is stopped (what left the
    group cannot be found any more), and the run is marked stopped, with the job's exit
    code once the scheduler says the job ended."""
    cancel_job(rec.get("job"), rec.get("batch"))
    pid = rec.get("pid")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not isinstance(pid, int) or start_ticks(pid) != rec.get("pid_start"):
            break  # gone, or the pid is another process's now
        try:
            os.killpg(pid, sig)
        except (OSError, TypeError):
            break
        end = time.monotonic() + grace
        while time.monotonic() < end and start_ticks(pid) is not None:
            time.sleep(0.05)
    code = None
    if rec.get("job"):
        end = time.monotonic() + grace + 30.0
        answer = job_state(rec, fresh=True)
        while answer is None and time.monotonic() < end:
            time.sleep(0.5)
            answer = job_state(rec, fresh=True)
        code = answer.get("code") if isinstance(answer, dict) else None
    write_json(
        os.path.join(folder, "exit.json"),
        {"reason": "stopped", "code": code, "ended": time.time(), "stopped": [], "lost": True},
    )


def do_prune(args):
    """Remove every run that ended (exited, stopped, lost) at least ``--older-than`` s ago."""
    removed = []
    for folder, rec in every_run(args):
        ended = rec.get("ended") or rec.get("started") or 0
        if rec["state"] != "running" and time.time() - ended >= (args.older_than or 0):
            remove(folder, rec)
            removed.append(rec.get("id") or os.path.basename(folder))
    return protocol.finish("rm", 0, removed=removed)


def remove(folder, rec):
    """A run's record, and the folder of its shipped files (a runner's private dir)."""
    shipped = rec.get("dir")
    if shipped and os.path.basename(shipped).startswith("remotekit-") and os.path.isdir(shipped):
        shutil.rmtree(shipped, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)


def do_rm(args, folder):
    rec = info(folder)
    if rec["state"] == "running":
        return protocol.fail("rm", "run %s is still running: stop it first" % args.id)
    remove(folder, rec)
    return protocol.finish("rm", 0, id=args.id)


# -- command line ------------------------------------------------------------------------------


def parse(argv):
    import argparse

    p = argparse.ArgumentParser(prog="supervisor")
    p.add_argument("mode", choices=["start", "list", "logs", "wait", "stop", "rm"])
    p.add_argument("id", nargs="?", default="")
    p.add_argument("--runs-dir", default="")
    p.add_argument("--host", default="")
    p.add_argument("--grace", type=float, default=DEFAULT_GRACE)
    p.add_argument("--script", default="")
    p.add_argument("--display", default="")
    p.add_argument("--offset", type=int, default=None)
    p.add_argument("--tail", type=int, default=None)
    p.add_argument("--follow", action="store_true")
    p.add_argument("--stream", choices=STREAMS, default="output")
    p.add_argument("--batch", default="")
    p.add_argument("--finished", action="store_true")
    p.add_argument("--older-than", type=float, default=0.0)
    own, rest = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :])
        if "--" in argv
        else (
            argv,
            [],
        )
    )
    args = p.parse_args(own)
    args.argv = rest
    args.display = json.loads(args.display) if args.display else None
    args.batch = json.loads(args.batch) if args.batch else None
    return args


def main(argv):
    args = parse(argv)
    if args.mode == "start":
        return Supervisor(args).run()
    if args.mode == "list":
        return do_list(args)
    if args.mode == "rm" and args.finished:
        return do_prune(args)
    folder, code = find(args)
    if folder is None:
        return code
    modes = {"logs": do_logs, "wait": do_wait, "stop": do_stop, "rm": do_rm}
    return modes[args.mode](args, folder)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
