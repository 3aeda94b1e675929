"""``trainlog.py --follow``: follow a training log as it grows and report each new incident
as it is found, with the detector and event code of the whole-log analysis.

The follower keeps a window of the log's latest complete lines (or records: what its
reader's ``tail`` keeps): at least :data:`MIN_KEEP` rows and two preset windows, so every
new value is judged against a full baseline. Whenever lines arrived it reads that window
with the readers of ``read`` (the reader that claimed the file, over the window's bytes),
repairs the steps, detects and places events as :func:`.analyze.analyze_log` does, and
sends:

``source``    once the log's columns are known (again after a rotation): as ``train-log``
``spike``     one per new spike, cliff or non-finite run (the fields of ``train-log``'s)
``event``     one per new resume (the step counter went back, or a line says so)
``status``    state ("waiting", "following"), step, loss, rate (steps a second), rows,
              lines, bytes, idle_s (since the last new line), incidents; ``backlog``: the
              incidents already in the log when the follow began (not sent; with
              ``--after-step S``, a follow taken up again, those that begin after S are)
``warning``   a truncated or replaced (rotated) log, a reading caveat
``error``     the log cannot be followed (then ``summary`` and ``done``, exit 2)

An incident is sent once: per metric and kind, the steps its incidents covered are marked,
and one whose onset lies within them is the same incident seen again (still going, or seen
from a window that moved). A partial last line waits for its newline. The follow ends when
the step is stopped (Ctrl-C, a cancel, a lost connection: the runner stops it), after
``--duration`` seconds, or (``--run-dir``) once the run that writes the log ended and its
last lines were judged, with a ``summary`` and ``done`` (exit 1 if incidents were sent;
after a run, ``run_state`` and ``run_exit_code``: the run's, as ``logs --follow`` has them).
"""

from __future__ import annotations

import math
import os
import time
from collections import deque

from ..infile import identity, moved, open_regular
from ..protocol import EXIT_FINDINGS, EXIT_OK
from .analyze import (
    FINDING_OF,
    bucket_codes,
    detect_all,
    place,
    prepare_columns,
    preset_for,
    reading_caveats,
    stride_of,
)
from .base import PRESETS, LogError, conclude, send
from .choose import NoLoss
from .events import find_events
from .find import ckpt_dir_of, find_log
from .read import read_source, read_with
from .readers import FOLLOWED, by_format, claimants
from .resumes import check_resumes
from .source import READ, Source

POLL_S = 0.05  # the file is looked at this often (a stat and a read: cheap)
STATUS_S = 1.0  # a status record at least this often: also the heartbeat the local side stops on
MIN_KEEP = 2000  # rows kept as the baseline at least (and two preset windows)
START_BYTES = 1 << 24  # of a large log, the follow starts this far before its end (lines)
READ_MAX = 1 << 23  # bytes read per poll at most: a status goes out between, well inside the
# silence the local follower tolerates (remotekit.follow.SILENT_S) even on a starved CPU
NOLOSS_AFTER = 200  # lines without a loss column after which that is an error, not a wait
RATE_S = 10.0  # the rate is measured over this many seconds
INCIDENT_EVENTS = ("resume",)
SETTLE_BYTES = 1 << 16  # of a text log, the first bytes read to settle its reader


class NotFollowed(LogError):
    """A log that does not grow by appending lines or records."""


class Follower:
    """The state of one follow: the open file, its window, what was sent."""

    def __init__(self, opts, path, chosen_from=None, ckpt_dir=None):
        self.opts, self.wanted = opts, opts.wanted
        self.path, self.chosen_from = path, chosen_from
        self.ckpt_dir = ckpt_dir  # whose saves are events, and joined to a spike at a resume
        self.lost = False  # a spike at a resume from a checkpoint that lacked state was sent
        self.f = None
        # what the file held when the follow began is the backlog: judged, never sent
        self.started = not _size(self.path)
        self.rows = 0
        self.sent = 0
        self.resumes_sent = 0
        self.kinds = set()  # of the incidents sent
        self.lines = 0
        self.last_line = time.monotonic()
        self.next_status = 0.0
        self.next_judge = 0.0
        self.rates = deque()
        self.state = "waiting"
        self.why = "no file at %s yet" % self.path
        self.backlog = None
        self._reset()

    def _reset(self):
        self.tail = None
        self.offset = 0
        self.reader = None
        self.sure = False  # the format was sniffed from enough of the file (64 KiB)
        self.marks = {}  # (metric, kind) -> the last step its sent incidents covered
        self.resumes = set()
        self.full = False  # the window once held four preset windows
        self.source_sent = False
        self.step = self.loss = None
        self.pending = False

    # -- the file ------------------------------------------------------------------------

    def poll(self):
        """Look at the file once: open, notice a truncation or a new file, read, judge."""
        now = time.monotonic()
        if self.f is None and not self._open():
            return
        self._check_replaced()
        if self.f is None:  # replaced by a file still empty: opened once it has lines
            return
        got = self._read()
        if got:
            self.lines += got
            self.last_line = now
            self.pending = True
        if self.pending and now >= self.next_judge:
            self.pending = False
            t0 = time.monotonic()
            self._judge()
            # at most a fifth of a core: a slow analysis (a large window) runs less often
            self.next_judge = t0 + 5 * (time.monotonic() - t0)

    def drain(self):
        """The log's last lines, all of them, judged: the run that wrote it ended."""
        if self.f is None:
            return
        while self._read():
            self.pending = True
            self.status()
        if self.pending:
            self.pending = False
            self._judge()

    def _open(self):
        try:
            self.f = open_regular(self.path)
        except FileNotFoundError:
            return False
        st = os.fstat(self.f.fileno())
        self.ident = identity(self.f)
        if not self._sniff():
            self.f.close()
            self.f = None
            return False
        self.tail = self.reader.tail(self.f)
        start = 0 if self.started or self.tail.from_start else max(0, st.st_size - START_BYTES)
        start = max(start, self.tail.begin)
        self.f.seek(max(0, start - 1))
        if start > 0:
            self.f.readline()  # to the start of the next whole line
        self.offset = self.f.tell()
        return True

    def _sniff(self):
        """The format, from the file's first lines (again, while they are few)."""
        if self.opts.format != "auto":
            self.reader = by_format(self.opts.format)
        else:
            try:
                self.reader = self._claimant(claimants(Source(self.path)))
            except LogError:  # empty so far
                self.why = "%s is empty so far" % self.path
                return False
        if not self.reader.FOLLOWS:
            raise NotFollowed(
                "%s: not followed (train-log --follow follows logs that grow by appending: "
                "%s); run train-log without --follow to analyse it whole"
                % (self.reader.NOT_FOLLOWED or "a " + self.reader.WHAT, FOLLOWED)
            )
        # a binary format's sniff is sure from its magic bytes; a text one's from enough lines
        binary = self.reader.BINARY
        self.sure = self.opts.format != "auto" or binary or self.offset >= 1 << 16
        return True

    def _claimant(self, claimed):
        """The reader of the log: the surest claimant, unless its reading of the file's
        first lines finds no loss where the text reader after it does (a console with a tab
        in each line sniffs as a headerless TSV; its line templates hold the loss), as
        ``train-log`` reads it whole."""
        if len(claimed) < 2 or claimed[0].BINARY:
            return claimed[0]
        with open_regular(self.path) as f:
            head = f.read(SETTLE_BYTES)
        head = head[: head.rfind(b"\n") + 1]
        try:
            _, fmt, _, _ = read_source(Source(self.path, head), "auto", self.wanted)
        except (LogError, NoLoss):  # too few lines yet: sniffed again as it grows
            return claimed[0]
        return by_format(fmt) or claimed[0]

    def _check_replaced(self):
        """A new file at the path (rotated) or a shorter one (truncated): start again."""
        change = moved(self.path, self.f, self.ident, self.offset)
        if change is None:
            return
        how, size = change
        if how == "replaced":
            self._read()
            self._judge()  # the old file's last lines
            what = "replaced (rotated?): following the new file from its start"
        else:
            what = "truncated (%d -> %d bytes): following it again from its start" % (
                self.offset,
                size,
            )
        send("warning", message="%s was %s" % (self.path, what))
        self.f.close()
        self.f = None
        self._reset()
        self.started = True
        self._open()

    def _read(self):
        got, budget = 0, READ_MAX
        while budget > 0:
            data = self.f.read(min(READ, budget))
            if not data:
                break
            self.offset += len(data)
            budget -= len(data)
            got += self.tail.feed(data)
        return got

    # -- the judging ---------------------------------------------------------------------

    def _judge(self):
        """Read the window, detect, send what is new (nothing from the first: the backlog)."""
        first, self.started = not self.started, True
        if first:  # a long backlog: its latest lines are baseline enough, and judged at once
            self.tail.keep_last(8 * self._keep_rows(PRESETS[self.opts.preset]["window"]))
        if not self.sure:
            self._sniff()
        try:
            window = Source(self.path, self.tail.window())
            ing, fmt, _, _ = read_with(self.reader, window, self.wanted)
        except NoLoss:
            if self.lines >= NOLOSS_AFTER:
                raise
            self.why = "no loss column in its first %d lines yet" % self.lines
            return
        if ing.rows() == 0:
            self.why = "no rows in it yet"
            return
        warnings = []
        steps, cols, n, _ = prepare_columns(ing, warnings)
        self.full = self.full or n >= 4 * PRESETS[self.opts.preset]["window"]
        preset = preset_for(self.opts.preset, 1 << 60 if self.full else n)
        incidents, compact, _ = detect_all(ing, cols, steps, n, preset)
        opts = self.opts
        events = find_events(
            ing, steps, cols, {}, warnings, opts.ckpt_steps, self.ckpt_dir, opts.steps_per_epoch
        )
        place(incidents, events, *bucket_codes({}, ing, cols, n))
        self._join_resumes(incidents, steps, n)
        if not self.source_sent:
            self._send_source(ing, fmt, steps, n)
        # the first look: the backlog, up to --after-step when given (a follow taken up again)
        quiet = None
        if first:
            quiet = math.inf if self.opts.after_step is None else self.opts.after_step
        held = self._send_incidents(incidents, compact, steps, quiet)
        held += self._send_resumes(events, quiet)
        if first:
            self.backlog = held
        self.state = "following"
        self.rows = n
        self._keep(n, preset["window"])
        self._measure(steps, compact)

    def _join_resumes(self, incidents, steps, n):
        """Each new incident at a resume joined to the checkpoint resumed from, as
        ``train-log`` joins them (:func:`.resumes.check_resumes`); a checkpoint is opened
        once per incident sent, never for one sent before."""
        _, tol = stride_of(steps, n, self.opts.tolerance)
        for inc in incidents:
            if self._is_new(inc) and check_resumes([inc], self.ckpt_dir, tol):
                inc["lost_state"] = True  # not sent: the summary's finding

    def _is_new(self, inc):
        mark = self.marks.get((inc["metric"], inc["kind"]))
        return mark is None or inc["onset_step"] > mark

    def _send_source(self, ing, fmt, steps, n):
        stride, tol = stride_of(steps, n, self.opts.tolerance)
        send(
            "source",
            path=os.path.abspath(self.path),
            chosen_from=self.chosen_from,
            format=fmt,
            dialect=ing.dialect,
            lines=self.lines,
            rows=n,
            skipped=ing.skipped,
            bad_lines=ing.bad,
            step_key=ing.step_key,
            columns=dict(ing.metrics + ing.meta),
            metrics=[label for label, _ in ing.metrics],
            why=getattr(ing, "why", {}),
            first_step=steps[0],
            last_step=steps[-1],
            stride=stride,
            tolerance=tol,
        )
        for w in reading_caveats(ing):
            send("warning", message=w)
        self.source_sent = True

    def _send_incidents(self, incidents, compact, steps, quiet):
        """Each incident not sent before (by the marks of its metric and kind), but those
        that begin at or before step ``quiet`` (the backlog): how many those were."""
        held = 0
        for inc in sorted(incidents, key=lambda i: i["onset_step"]):
            key = (inc["metric"], inc["kind"])
            last = _last_step(inc, compact[inc["metric"]][1], steps)
            mark = self.marks.get(key)
            if mark is not None and inc["onset_step"] <= mark:
                self.marks[key] = max(mark, last)
                continue
            self.marks[key] = last
            if quiet is not None and inc["onset_step"] <= quiet:
                held += 1
                continue
            self.sent += 1
            self.kinds.add(inc["kind"])
            self.lost = self.lost or inc.get("lost_state", False)
            rec = dict((k, v) for k, v in inc.items() if k not in _INTERNAL)
            send("spike", **rec)
        return held

    def _send_resumes(self, events, quiet):
        """Each resume in the window that the last window did not hold (but those at or
        before step ``quiet``: how many those were)."""
        now = set((e[0], e[1]) for e in events if e[0] in INCIDENT_EVENTS)
        held = 0
        for e in events:
            if (e[0], e[1]) not in now - self.resumes:
                continue
            if quiet is not None and e[1] <= quiet:
                held += 1
                continue
            self.sent += 1
            self.resumes_sent += 1
            self.kinds.add(e[0])
            send("event", kind=e[0], step=e[1], source=e[2], detail=e[3])
        self.resumes = now
        return held

    def _keep(self, n, window):
        """Past twice the rows the baseline needs, drop the oldest half of the window; a
        log of mostly other lines (a trainer's chatter) is cut by lines as well."""
        keep = self._keep_rows(window)
        lines = len(self.tail.items)
        if n > 2 * keep:
            self.tail.trim(1.0 - float(keep) / n)
        elif lines > 16 * keep:
            self.tail.trim(0.5)

    @staticmethod
    def _keep_rows(window):
        return max(MIN_KEEP, 2 * window)

    def _measure(self, steps, compact):
        now = time.monotonic()
        self.step = steps[-1]
        loss = compact.get("loss") or next(iter(compact.values()), None)
        self.loss = loss[0][-1] if loss is not None and len(loss[0]) else None
        self.rates.append((now, self.step))
        while len(self.rates) > 2 and now - self.rates[1][0] >= RATE_S:
            self.rates.popleft()

    # -- the status ----------------------------------------------------------------------

    def status(self):
        """A status record, at most every :data:`STATUS_S` (also with nothing new)."""
        now = time.monotonic()
        if now < self.next_status:
            return
        self.next_status = now + STATUS_S
        rate = None
        if len(self.rates) >= 2:
            (t0, s0), (t1, s1) = self.rates[0], self.rates[-1]
            rate = (s1 - s0) / (t1 - t0) if t1 > t0 and s1 >= s0 else None
        if now - self.last_line > RATE_S and self.step is not None:
            rate = 0.0  # no new line for a while: the run stands (or stopped)
        fields = dict(
            state=self.state,
            step=self.step,
            loss=self.loss,
            rate=rate,
            rows=self.rows,
            lines=self.lines,
            bytes=self.offset,
            idle_s=round(now - self.last_line, 1),
            incidents=self.sent,
        )
        if self.state == "waiting":
            fields["why"] = self.why
        if self.backlog is not None:
            fields["backlog"] = self.backlog
            self.backlog = None
        send("status", **fields)


_INTERNAL = ("row", "idx", "peak_idx", "end_idx", "lost_state")


def _last_step(inc, rows, steps):
    """The step of an incident's last row (a non-finite run: ``flagged`` rows from its
    first; a spike or cliff: the row before its end, the window's last when not back)."""
    if inc["kind"] == "nonfinite":
        return steps[min(len(steps) - 1, inc["row"] + inc["flagged"] - 1)]
    j = max(inc["idx"], inc["end_idx"] - 1)
    return steps[rows[j] if rows is not None else j]


def _size(path):
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def follow_log(opts):
    """Follow ``opts.path`` until stopped (or ``opts.duration`` seconds); return the exit
    code. Raises LogError, NoLoss and OSError for a log that cannot be followed."""
    path, chosen_from, ckpt_dir = opts.path, None, opts.ckpt_dir
    if os.path.isdir(path):
        path, chosen_from, notes = find_log(path)
        for note in notes:
            send("warning", message=note)
        if ckpt_dir is None and not opts.ckpt_steps:
            ckpt_dir = ckpt_dir_of(opts.path)  # a run directory's own saves, as train-log
    fol = Follower(opts, path, chosen_from, ckpt_dir)
    end = time.monotonic() + opts.duration if opts.duration else None
    run = RunWatch(opts.run_dir) if opts.run_dir else None
    try:
        while end is None or time.monotonic() < end:
            ended = run is not None and run.ended()  # before reading: then all of it is read
            fol.poll()
            if ended:
                fol.drain()
                break
            fol.status()
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # stopped by hand there: the same end as after --duration
        pass
    code = EXIT_FINDINGS if fol.sent else EXIT_OK
    events = {"resume": fol.resumes_sent} if fol.resumes_sent else {}
    findings = [name for kind, name in FINDING_OF if kind in fol.kinds]
    findings += ["resumes"] if fol.resumes_sent else []
    findings += ["spike-at-resume"] if fol.lost else []
    return conclude(
        code,
        rows=fol.rows,
        spikes=fol.sent - fol.resumes_sent,
        events=events,
        findings=findings,
        **(run.end() if run is not None else {}),
    )


class RunWatch:
    """Whether the run whose record folder is ``folder`` ended, as the supervisor itself
    judges it (:func:`..supervisor.info`: its exit, a stop, its batch job's end, a vanished
    supervisor), asked once every :data:`STATUS_S`: what ``logs --follow`` ends on."""

    def __init__(self, folder):
        from .. import supervisor  # only a follow of a run needs it

        self.info = supervisor.info
        self.folder = folder
        self.next = 0.0
        self.rec = None

    def ended(self):
        now = time.monotonic()
        if now < self.next:
            return False
        self.next = now + STATUS_S
        self.rec = self.info(self.folder)
        return self.rec is None or self.rec["state"] != "running"

    def end(self):
        """The final record's fields: the run's state (None: its record is gone) and exit
        code (128+N for signal N; None while it runs, and for a lost run)."""
        rec = self.rec or {}
        return {"run_state": rec.get("state"), "run_exit_code": rec.get("exit_code")}
