"""remotekit's run supervisor: shipped THERE, beside runner.py and protocol.py.

A **run** is a command started with ``detach=True`` that outlives its step and its connection.
Each run has a record folder (0700; its files 0600)::

    <runs dir>/<id>/run.json     id, host, command (masked when it leaves the host), cwd,
                                 started, the supervisor's pid and start time, the
                                 command's pid and start time (null until it started: the
                                 record is made first, so no command runs unrecorded), the
                                 shipped files' dir; a batch job's ``job`` id and ``batch``
                                 (how to ask about it, cancel it)
                   output.log    stdout and stderr as they came, interleaved, byte for byte
                                 (what ``logs`` shows; offsets into it resume a follow)
                   stdout.log    stdout alone
                   stderr.log    stderr alone (so the two can be told apart)
                   loss.json     bytes of each log that could not be written (a full disk:
                                 the output is still drained, so the run never blocks on
                                 it); made at its full size with the record and updated in
                                 place, so it needs no new space; given up for exit.json's
                                 space when the disk is full at the end
                   exit.json     when it ended: code, ended, reason (exit | stopped), any
                                 leftovers it stopped, ``lost_bytes`` (loss.json's counts);
                                 written whole (temp + rename); for a batch job whose
                                 supervisor is gone, by whoever first saw the job end
                                 (``by``: the tool that said so)
                   stop.json     a stop request (its grace), read by the supervisor on TERM;
                                 made with the record and written in place: a stop needs no
                                 new space, and sends its TERM even when this write fails

Every record file is checked before it is used (:mod:`runrecord`: size, JSON, each field's
type and bounds); a run whose files fail is listed as ``corrupt``, with what is wrong, and is
never signalled. Only a pid > 1 whose start time is the recorded one is ever signalled.

The runs dir is ``--runs-dir`` (hosts.yaml ``runs_dir:``), else ``$XDG_STATE_HOME/remotekit/
runs``, else ``~/.local/state/remotekit/runs``: not a tmpfs, so a record survives a restart.

Modes (``python supervisor.py MODE ...``)::

    start ID [--runs-dir D] [--host H] [--grace S] [--script NAME] [--batch JSON] -- ARGV...
        run by the runner as a detached step, so it is in its own session and no step's stop
        reaches it. It records the run, becomes a child subreaper (orphans of the run
        re-parent to it), starts the command in its own session, reports {"id", "pid",
        "log"} (or {"error"}: one line naming host, run and cause; nothing left running, no
        record left) as one JSON line on the file descriptor $REMOTEKIT_REPORT_FD, copies
        the command's output into the logs, and records the exit. TERM/HUP/INT to it stop
        the run's whole tree (TERM, KILL after the grace); so does the end of the main
        process (leftovers). A log replaced under it (a new file at its path) is written
        from then on, as logging's WatchedFileHandler does.
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
        is quiet); a log found shorter than the offset (truncated) or replaced is followed
        from its start again after a ``reset`` record {"at": 0, "message"}; ``done``
        carries the run's state and exit code, the offset reached, and ``lost_bytes`` (of
        that log, when the disk was full)
    wait ID                              until the run ends; its ``run`` record
    stop ID [--grace S]                  stop the tree; the ``run`` record afterwards
    rm ID                                remove a finished (or corrupt) run's record
    rm --finished [--older-than S]       remove every run that ended at least S s ago

Every failure of a mode but ``start`` is an ``error`` record and a ``done`` (exit 2), never
a traceback: the local side shows it as the far side's error, once, and does not take it for
a lost connection. Standard library only, Python >= 3.8; records as :mod:`protocol` writes
them.
"""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

if not __package__:  # run as a file: its package imported by name (see remotekit.remote)
    sys.modules.setdefault("remotekit", type(sys)("remotekit")).__dict__.setdefault(
        "__path__", [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    )

from remotekit.remote import infile, protocol, runner, runrecord
from remotekit.remote.runrecord import CORRUPT, ID_RE, STREAMS

READ = 512 << 10  # bytes read at once for data records
MAX_RECORD = 960 << 10  # a record line stays below the engine's 1 MiB line (else it is cut)
POLL_S = 0.05  # how often a follow looks for new bytes
JOB_ASK_S = 5.0  # a batch job's state is asked at most this often (the scheduler is shared)
BEAT_S = 1.0  # a quiet follow says it is alive this often
DEFAULT_GRACE = 10.0
MAX_GRACE = 86400.0
SPARE = 4096  # loss.json's size: one block, what exit.json needs of a full disk
ASK = 64  # stop.json's size: {"grace": any float} fits


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
    """``data`` as ``path``, whole or not at all (a temp file beside it, then rename; the
    temp file gone on a failure: a full disk keeps no half-written one)."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def make_spare(path, size):
    """The file ``path``, ``size`` spaces: its space taken now, for :func:`write_in_place`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if os.write(fd, b" " * size) != size:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_in_place(path, data, size):
    """``data`` as JSON (padded with spaces to ``size``) over the file :func:`make_spare`
    made: no new space is needed, so this works on a full disk."""
    line = json.dumps(data).encode()
    if len(line) > size:
        raise ValueError("%d bytes do not fit in %s" % (len(line), path))
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, line.ljust(size), 0)
    finally:
        os.close(fd)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError, RecursionError):
        return None


def read_record(path, fields):
    """``(record, None)`` from the record file ``path`` when it is sound; ``(None, None)``
    when there is none; ``(None, what is wrong)`` else (:func:`runrecord.parse`)."""
    name = os.path.basename(path)
    try:
        with infile.open_regular(path) as f:
            data = f.read(runrecord.MAX_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except (infile.NotRegularFile, IsADirectoryError):
        return None, "%s is not a regular file" % name
    except OSError as e:
        return None, "%s cannot be read (%s)" % (name, os.strerror(e.errno or errno.EIO))
    return runrecord.parse(data, fields, name)


def lost_bytes(folder, ended=None):
    """``{log: bytes}`` of each log of the run that lost bytes (exit.json's, else loss.json's;
    a loss.json being written, or not sound, counts none)."""
    if ended and ended.get("lost_bytes"):
        return dict(ended["lost_bytes"])
    counts, _ = read_record(os.path.join(folder, "loss.json"), runrecord.LOSS)
    return {k: n for k, n in (counts or {}).items() if n}


def record_end(folder, data):
    """exit.json, whole, with the logs' ``lost_bytes``. On a full disk, loss.json's space (kept
    for this) is given up first; then exit.json goes without the lists of processes. OSError
    when even that cannot be written."""
    path = os.path.join(folder, "exit.json")
    data = dict(data)
    if "lost_bytes" not in data:
        data["lost_bytes"] = lost_bytes(folder)
    try:
        return write_json(path, data)
    except OSError:
        pass
    try:
        os.unlink(os.path.join(folder, "loss.json"))  # its counts are in data
    except OSError:
        pass
    try:
        return write_json(path, data)
    except OSError:
        keep = ("reason", "code", "ended", "lost", "lost_bytes", "by")
        return write_json(path, {k: data[k] for k in keep if k in data})


def start_ticks(pid, ended_too=False):
    """The process's start time (clock ticks since boot), or None when it is gone (ended,
    unless ``ended_too``: a child not yet reaped still has it): with the pid, it tells the
    supervisor from a later process that got the same pid."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in (b"Z", b"X") and not ended_too:
        return None
    return int(fields[19])


def is_it(pid, start):
    """Whether ``pid`` is the process a record names: a pid > 1 (0, 1 and negative ones
    signal a group, init, every process of the user), running, started at ``start``."""
    return type(pid) is int and pid > 1 and start is not None and start_ticks(pid) == start


def alive(proc):
    return isinstance(proc, dict) and is_it(proc.get("pid"), proc.get("start"))


def send_signal(pid, start, sig, group=False):
    """``sig`` to the process ``pid`` (its process group with ``group``) if it is the one a
    record names (:func:`is_it`): the one place a recorded pid is signalled. Whether it was."""
    if not is_it(pid, start):
        return False
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except OSError:
        return False
    return True


def ended_state(ended):
    return "stopped" if ended.get("reason") == "stopped" else "exited"


def state_of(folder, record):
    """(state, exit.json's data or None, what is wrong or None) of a run. Without its
    supervisor a batch run is what its job is: running while the job has not ended; once it
    has, its end is written as the run's exit.json (the scheduler forgets jobs); lost when
    no tool knows the job."""
    ended, why = read_record(os.path.join(folder, "exit.json"), runrecord.END)
    if why is not None:
        return CORRUPT, None, why
    if ended is not None:
        return ended_state(ended), ended, None
    if alive(record["supervisor"]):
        return "running", None, None
    if record.get("job"):
        answer = job_state(record)
        if answer is None:
            return "running", None, None
        if answer != "unknown":
            if not os.path.exists(os.path.join(folder, "exit.json")):  # not its supervisor's
                try:
                    record_end(folder, answer)
                except OSError:  # a full disk: what the scheduler said, not kept
                    return ended_state(answer), answer, None
            return state_of(folder, record)
    return "lost", None, None


def info(folder):
    """A run's ``run`` record; None when ``folder`` holds no run.json (not a run, or one being
    recorded); state ``corrupt``, with the ``problem``, when a record file fails its check."""
    record, why = read_record(os.path.join(folder, "run.json"), runrecord.RUN)
    if record is None and why is None:
        return None
    if why is None and record["id"] != os.path.basename(folder):
        why = "run.json: id is not its folder's name"
    if why is None:
        state, ended, why = state_of(folder, record)
    if why is not None:
        log = os.path.join(folder, "output.log")
        return {
            "type": "run",
            "id": os.path.basename(folder),
            "state": CORRUPT,
            "problem": why,
            "log": log,
        }
    out = dict(record)
    out.update(
        {
            "type": "run",
            "state": state,
            "exit_code": (ended or {}).get("code"),
            "ended": (ended or {}).get("ended"),
            "stopped": (ended or {}).get("stopped") or [],
            "log": os.path.join(folder, "output.log"),
            "command": protocol.mask_argv(record["command"]),
            "lost_bytes": lost_bytes(folder, ended),
        }
    )
    return out


class Refused(Exception):
    """What a mode could not do, as its one ``error`` record (exit 2)."""


def find(args):
    """The folder of run ``args.id`` (Refused: not an id, no such run)."""
    if not runrecord.is_id(args.id):
        raise Refused("not a run id: %r" % args.id)
    folder = os.path.join(runs_dir(args.runs_dir), args.id)
    if info(folder) is None:
        raise Refused("no run %s in %s" % (args.id, os.path.dirname(folder)))
    return folder


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


class Log(object):
    """One of a run's logs, appended to. A chunk is written whole, or what of it could not be
    written (a full disk) is counted in ``lost``: the caller goes on draining the run's pipe.
    A new file at its path (the log replaced) is written from then on."""

    def __init__(self, path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self.ident = self._ident(os.fstat(self.fd))
        self.lost = 0

    @staticmethod
    def _ident(st):
        return st.st_dev, st.st_ino

    def write(self, data):
        """Whether all of ``data`` was written."""
        self._follow_path()
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except OSError:  # ENOSPC, EDQUOT, EIO: the rest of the chunk is lost
                n = 0
            if not n:
                self.lost += len(view)
                return False
            view = view[n:]
        return True

    def _follow_path(self):
        try:
            ident = self._ident(os.stat(self.path))
        except OSError:
            return  # removed: nothing is made in its place
        if ident != self.ident:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            except OSError:
                return
            os.close(self.fd)
            self.fd, self.ident = fd, self._ident(os.fstat(fd))


class Supervisor(object):
    def __init__(self, args):
        self.args = args
        self.folder = os.path.join(runs_dir(args.runs_dir), args.id)
        self.stopping = []
        self.lock = threading.Lock()
        # the runner waits on this pipe for one line; the command must not see its number
        self.report_fd = int(os.environ.pop("REMOTEKIT_REPORT_FD", "-1"))
        self.job = None  # a batch job's id, once its submitter said it
        self.child = None
        self.made = False  # the record folder, by this supervisor (removed if it fails)
        self.logs = {}

    def report(self, data):
        fd, self.report_fd = self.report_fd, -1
        if fd >= 0:
            try:
                os.write(fd, (json.dumps(data) + "\n").encode())
            except OSError:
                pass  # the step gave up waiting: the run goes on, recorded
            finally:
                os.close(fd)

    def refuse(self, what, error):
        """Report that the run did not start, in one line naming host, run and cause: False."""
        where = self.args.host or "this host"
        cause = error.strerror or str(error)
        self.report({"error": "run %s on %s: %s: %s" % (self.args.id, where, what, cause)})
        return False

    def run(self):
        os.umask(0o077)
        record = {
            "id": self.args.id,
            "host": self.args.host,
            "command": self.args.display or self.args.argv,
            "cwd": os.getcwd(),
            "started": time.time(),
            "supervisor": {"pid": os.getpid(), "start": start_ticks(os.getpid())},
            "pid": None,
            "pid_start": None,
            "dir": os.environ.get("REMOTEKIT_DIR") or None,
        }
        if not self.record(record):
            return 1
        runner.become_subreaper()
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, lambda signum, frame: self.stopping.append(signum))
        child, pipes = self.spawn()
        if child is None:
            return 1
        self.child = child
        record.update({"pid": child.pid, "pid_start": start_ticks(child.pid, ended_too=True)})
        if not self.rewrite(record, child):
            return 1
        copiers = [self.copy(pipes[1], "stderr")]
        if self.args.batch:
            self.job = self.job_id(pipes[0])
            record.update({"job": self.job, "batch": self.args.batch})
            if not self.rewrite(record, child):
                return 1
        copiers.append(self.copy(pipes[0], "stdout"))
        log = os.path.join(self.folder, "output.log")
        self.report({"id": self.args.id, "pid": child.pid, "log": log})
        self.finish(child, copiers)
        return 0

    def record(self, record):
        """The run's record folder, made before anything starts: its logs, loss.json and
        stop.json (their space taken now), then run.json. On a failure it is removed and
        nothing starts: False, reported."""
        try:
            os.makedirs(os.path.dirname(self.folder), 0o700, exist_ok=True)
            os.mkdir(self.folder, 0o700)
            self.made = True
        except OSError as e:
            return self.refuse("cannot make its record folder %s" % self.folder, e)
        try:
            self.logs = {s: Log(os.path.join(self.folder, s + ".log")) for s in STREAMS}
            make_spare(os.path.join(self.folder, "loss.json"), SPARE)
            make_spare(os.path.join(self.folder, "stop.json"), ASK)
            write_json(os.path.join(self.folder, "run.json"), record)
        except OSError as e:
            shutil.rmtree(self.folder, ignore_errors=True)
            return self.refuse("cannot record it in %s" % self.folder, e)
        return True

    def rewrite(self, record, child):
        """run.json again, with what started (the command's pid, the batch job): on a failure
        the command is stopped and the record removed: False, reported."""
        try:
            write_json(os.path.join(self.folder, "run.json"), record)
            return True
        except OSError as e:
            cancel_job(self.job, self.args.batch)
            runner.stop_tree(child, 1.0)
            child.wait()
            shutil.rmtree(self.folder, ignore_errors=True)
            return self.refuse("cannot record its pid in %s (stopped)" % self.folder, e)

    def job_id(self, src):
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
            self.keep("stdout", rest)
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

    def keep(self, stream, data):
        """``data`` of ``stream`` into its log and the interleaved one, in the same order in
        both; bytes that could not be written are counted (loss.json), never waited on."""
        with self.lock:
            whole = self.logs[stream].write(data)
            whole = self.logs["output"].write(data) and whole
            if not whole:
                counts = {s: log.lost for s, log in self.logs.items() if log.lost}
                try:
                    write_in_place(os.path.join(self.folder, "loss.json"), counts, SPARE)
                except (OSError, ValueError):
                    pass  # given up for exit.json, or removed: the counts go there at the end

    def copy(self, src, stream):
        def pump():
            while True:
                try:
                    b = os.read(src, 1 << 16)
                except OSError:
                    break
                if not b:
                    break
                self.keep(stream, b)
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
        with self.lock:
            data["lost_bytes"] = {s: log.lost for s, log in self.logs.items() if log.lost}
        try:
            record_end(self.folder, data)
        except OSError as e:  # nobody hears this: the run shows as lost
            sys.stderr.write(
                "remotekit: run %s: its end was not recorded: %s\n" % (self.args.id, e)
            )

    def grace(self):
        asked = read_json(os.path.join(self.folder, "stop.json")) or {}
        grace = asked.get("grace") if isinstance(asked, dict) else None
        if type(grace) not in (int, float) or not 0 <= grace <= MAX_GRACE:
            grace = self.args.grace
        return float(grace)


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


def again(path, f, change, offset):
    """``(file, identity, offset)`` to go on with from the start of the log at ``path``, which
    :func:`infile.moved` found changed (``f``: the file read so far); said in a ``reset``."""
    how, size = change
    if how == "replaced":
        what = "replaced: following the new file from its start"
    else:
        what = "truncated (%d -> %d bytes): following it from its start" % (offset, size)
    protocol.emit({"type": "reset", "at": 0, "message": "%s was %s" % (path, what)})
    f.close()
    f = infile.open_regular(path)
    return f, infile.identity(f), 0


def do_logs(args, folder):
    path = os.path.join(folder, args.stream + ".log")
    f = infile.open_regular(path)
    try:
        ident = infile.identity(f)
        offset = args.offset
        if args.tail is not None and offset is None:
            offset = tail_offset(path, args.tail) if args.tail > 0 else os.path.getsize(path)
        offset = offset or 0
        change = infile.moved(path, f, ident, offset)
        if change is not None:  # shorter than the offset (a follow resumed): from the start
            f, ident, offset = again(path, f, change, offset)
        protocol.emit({"type": "start", "at": offset})
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
            if not args.follow:
                break
            change = infile.moved(path, f, ident, offset)
            if change is not None:  # the old file was read to its end just now
                f, ident, offset = again(path, f, change, offset)
                continue
            if ended:
                break
            if time.monotonic() - quiet_since >= BEAT_S:
                protocol.emit({"type": "beat", "at": offset})
                quiet_since = time.monotonic()
            time.sleep(POLL_S)
    finally:
        f.close()
    rec = info(folder) or {}
    return protocol.finish(
        "logs",
        0,
        offset=offset,
        state=rec.get("state"),
        run_exit_code=rec.get("exit_code"),
        lost_bytes=(rec.get("lost_bytes") or {}).get(args.stream, 0),
    )


def do_wait(args, folder):
    while not ended_now(folder):
        time.sleep(0.25)
    protocol.emit(info(folder))
    return protocol.finish("wait", 0)


def corrupt(args, rec, what):
    return Refused("run %s: its record is corrupt (%s): %s" % (args.id, rec.get("problem"), what))


def do_stop(args, folder):
    rec = info(folder)
    if rec["state"] == CORRUPT:
        raise corrupt(args, rec, "not stopped, nothing was signalled")
    sup = rec["supervisor"]
    if rec["state"] == "running" and alive(sup):
        ask(folder, args.grace)
        send_signal(sup["pid"], sup["start"], signal.SIGTERM)
        end = time.monotonic() + args.grace + 10.0
        while not ended_now(folder) and time.monotonic() < end:
            time.sleep(0.05)
    elif rec["state"] in ("running", "lost"):  # running: a batch job, without its supervisor
        stop_orphan(folder, rec, args.grace)
    protocol.emit(info(folder))
    return protocol.finish("stop", 0)


def ask(folder, grace):
    """Tell the supervisor the grace of the stop, in stop.json: in place, so a full disk does
    not stop it; a run recorded before stop.json was made gets it the usual way. The TERM
    goes whatever happens here: the supervisor then takes its own grace."""
    path = os.path.join(folder, "stop.json")
    try:
        if os.path.exists(path):
            write_in_place(path, {"grace": grace}, ASK)
        else:
            write_json(path, {"grace": grace})
    except (OSError, ValueError):
        pass


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
    pid, start = rec.get("pid"), rec.get("pid_start")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not send_signal(pid, start, sig, group=True):
            break  # gone, never started, or the pid is another process's now
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
    data = {"reason": "stopped", "code": code, "ended": time.time(), "stopped": [], "lost": True}
    try:
        record_end(folder, data)
    except OSError as e:
        raise Refused(
            "run %s was stopped, but its end could not be recorded: %s"
            % (rec["id"], e.strerror or e)
        ) from None


def do_prune(args):
    """Remove every run that ended (exited, stopped, lost) at least ``--older-than`` s ago."""
    removed = []
    for folder, rec in every_run(args):
        ended = rec.get("ended") or rec.get("started") or 0
        if rec["state"] in ("running", CORRUPT):  # a corrupt one may run: removed by its id
            continue
        if time.time() - ended >= (args.older_than or 0):
            remove(folder, rec)
            removed.append(rec.get("id") or os.path.basename(folder))
    return protocol.finish("rm", 0, removed=removed)


def remove(folder, rec):
    """A run's record, and the folder of its shipped files where the record names one that
    :func:`is_shipped_dir` (a corrupt record's too: its ``dir`` is read as it stands, and
    only such a folder is ever removed, so a forged path removes nothing else)."""
    shipped = rec.get("dir") if rec["state"] != CORRUPT else raw_field(folder, "dir")
    if is_shipped_dir(shipped):
        shutil.rmtree(shipped, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)


def raw_field(folder, key):
    """``key`` of the run's run.json as it stands (read within its bound), or None."""
    try:
        with infile.open_regular(os.path.join(folder, "run.json")) as f:
            record = json.loads(f.read(runrecord.MAX_BYTES + 1).decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # OSError: infile.NotRegularFile too
        return None
    return record.get(key) if isinstance(record, dict) else None


def is_shipped_dir(path):
    """Whether ``path`` is what :func:`runner.private_dir` makes: an absolute path named
    ``remotekit-`` + 12 hex digits, a directory itself (not a link to one), and ours."""
    if not isinstance(path, str) or not os.path.isabs(path):
        return False
    name = os.path.basename(path)
    if len(name) != 22 or not name.startswith("remotekit-"):
        return False
    if any(c not in "0123456789abcdef" for c in name[10:]):
        return False
    try:
        st = os.lstat(path)
    except (OSError, ValueError):
        return False
    return (st.st_mode & 0o170000) == 0o040000 and st.st_uid == os.getuid()


def do_rm(args, folder):
    rec = info(folder)
    if rec["state"] == "running":
        raise Refused("run %s is still running: stop it first" % args.id)
    remove(folder, rec)
    return protocol.finish("rm", 0, id=args.id)


# -- command line ------------------------------------------------------------------------------


class Usage(Exception):
    """Arguments the supervisor cannot take: an ``error`` record, not argparse's exit."""


def parse(argv):
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise Usage(message)

    p = Parser(prog="supervisor")
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
    p.add_argument("--stream", default="output")
    p.add_argument("--batch", default="")
    p.add_argument("--finished", action="store_true")
    p.add_argument("--older-than", type=float, default=0.0)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.argv = argv[cut + 1 :]
    if args.stream not in STREAMS:
        raise Usage("not a log stream: %r (output, stdout or stderr)" % args.stream)
    for name in ("offset", "tail"):
        if (getattr(args, name) or 0) < 0:
            raise Usage("--%s must be 0 or more" % name)
    if not 0 <= args.grace <= MAX_GRACE:
        raise Usage("--grace must be 0 to %d seconds" % MAX_GRACE)
    args.display = json.loads(args.display) if args.display else None
    args.batch = json.loads(args.batch) if args.batch else None
    return args


def start(args):
    """Supervise run ``args.id``; a fault before it reported is its report, in one line."""
    sup = Supervisor(args)
    try:
        return sup.run()
    except Exception as e:
        if sup.report_fd < 0:
            raise  # reported: the run is recorded, and the traceback is in the runner's log
        if sup.child is not None:  # nothing runs unrecorded
            cancel_job(sup.job, args.batch)
            runner.stop_tree(sup.child, 1.0)
        if sup.made:
            shutil.rmtree(sup.folder, ignore_errors=True)
        where = args.host or "this host"
        why = "%s: %s" % (type(e).__name__, e)
        sup.report({"error": "run %s on %s: the supervisor failed: %s" % (args.id, where, why)})
        return 1


def main(argv):
    mode = argv[0] if argv and argv[0] in ("list", "logs", "wait", "stop", "rm") else "supervisor"
    try:
        args = parse(argv)
        if args.mode == "start":
            return start(args)
        if args.mode == "list":
            return do_list(args)
        if args.mode == "rm" and args.finished:
            return do_prune(args)
        modes = {"logs": do_logs, "wait": do_wait, "stop": do_stop, "rm": do_rm}
        return modes[args.mode](args, find(args))
    except (Usage, Refused) as e:
        return protocol.fail(mode, str(e))
    except OSError as e:  # e.g. a full disk, a log that is not a regular file
        where = ": %s" % e.filename if e.filename else ""
        return protocol.fail(mode, "%s%s" % (e.strerror or e, where))
    except Exception as e:  # a fault of ours: said once, as such, not as a lost connection
        return protocol.fail(mode, "the supervisor failed: %s: %s" % (type(e).__name__, e))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
