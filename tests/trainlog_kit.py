"""Driving the train-log diagnostics in tests: ``remotekit/remote/trainlog.py`` run as the
container runs it (a standalone script, JSON lines out), the shipped ``trainlog/`` package's
modules imported here, and a log followed through the API until an incident.

A plain module (no tests, no fixtures), shared by the train-log test modules; the logs
themselves come from tests/trainlog_factory.py.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import remotekit
import remotekit.diagnostics.trainlog as tl
from tests.harness import DATA, ROOT

SCRIPT = ROOT / "remotekit" / "remote" / "trainlog.py"
BOUND_S = 60.0  # every follow ends by itself after this long at the latest

# ---------------------------------------------------------------------------------------------
# running the script there


@dataclass
class Run:
    code: int
    records: list[dict[str, Any]]
    stderr: str

    def all(self, rtype: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["type"] == rtype]

    def one(self, rtype: str) -> dict[str, Any]:
        found = self.all(rtype)
        assert len(found) == 1, (rtype, self.records)
        return found[0]

    def spikes(self, metric: str = "loss", kind: str | None = None) -> dict[int, dict[str, Any]]:
        """By onset step (where a spike was planted; ``step`` is the peak's own)."""
        return {
            int(s["onset_step"]): s
            for s in self.all("spike")
            if s["metric"] == metric and (kind is None or s["kind"] == kind)
        }


def run(path: Path | str, *args: Any, script: Path = SCRIPT) -> Run:
    proc = subprocess.run(
        [sys.executable, str(script), str(path), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert all("type" in r for r in records)
    assert records and records[-1]["type"] == "done"
    assert records[-1]["exit_code"] == proc.returncode
    return Run(proc.returncode, records, proc.stderr)


# what a held-out run's train-log said, read by evidence (tests/diagnostics/trainlog/test_trainlog_heldout*.py)


def source(r: Run) -> dict[str, Any]:
    assert r.code in (0, 1), f"train-log exited {r.code}: {r.all('error')}"
    return r.one("source")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def said(r: Run) -> str:
    """What the run's reader, analysis and warnings said in words: the string values (not the
    field names) of every record but the preset's fixed rule text and the per-metric numbers."""
    return "\n".join(
        s for rec in r.records if rec["type"] not in ("preset", "metric") for s in _strings(rec)
    )


def series(r: Run, label: str) -> list[dict[str, Any]]:
    return [m for m in r.all("metric") if m.get("label") == label]


def close(a: float, b: float, rel: float = 0.02) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


UNHEALTHY_SAID = re.compile(
    r"unhealthy|never (learn|fell|moved)|did not learn|not learning|chance level|above chance|"
    r"uniform guess|stall|flat",
    re.I,
)


# What a held-out set's tests read in what the tool said (tests/public_runs.md, issue 35):
# narrower than UNHEALTHY_SAID and the first set's RUNS_SAID, which also match the reader's
# own words for a line template ("its restarts count epochs").
NEVER_LEARNED = re.compile(r"unhealthy|never learn|did not learn|not learning", re.I)
TWO_RUNS_SAID = re.compile(r"second run|appended|run[- ]part|new run", re.I)


def held_out(folder: str, rel: str) -> Path:
    """A committed public log of a held-out set (``tests/data/public/<folder>/<rel>``)."""
    path = DATA / "public" / folder / rel
    assert path.exists(), f"{path} is committed with this test (tests/public_runs.md)"
    return path


# What a held-out set's tests say of a restart or a second run, apart from the reader's own
# words for a template; the path is taken out first (a file may be named ``..._restart``).
RESTART_SAID = re.compile(
    r"restart|second run|appended|run[- ]part|new run|two runs|repeated (step|epoch|episode)",
    re.I,
)


def numbers(text: str, pattern: str) -> list[float]:
    """The floats ``pattern``'s group finds in ``text`` (multi-line): a held-out test's own
    reading of a file, with a plain regex, to hold the tool's answer against."""
    return [float(x) for x in re.findall(pattern, text, re.M)]


def said_apart_from_path(r: Run) -> str:
    """What the tool said, less the file's path (which may hold any word)."""
    src = r.one("source") if r.all("source") else {}
    return said(r).replace(str(src.get("path", "\0")), "")


def chosen(src: dict[str, Any]) -> str | None:
    """The column the reader took as the loss, as it names it (None where it names none)."""
    columns = src.get("columns")
    if not isinstance(columns, dict) or columns.get("loss") is None:
        return None
    return str(columns["loss"])


def resumes(r: Run) -> list[dict[str, Any]]:
    return [e for e in r.all("event") if e["kind"] == "resume"]


def assert_licensed_set(folder: str, section: str, at_least: int) -> None:
    """Each run of a held-out set keeps its source's LICENSE and a NOTICE.md naming the
    commit, and has its row in tests/public_runs.md's ``section``."""
    table = (DATA.parent / "public_runs.md").read_text("utf-8")
    table = table[table.index(section) :]
    base = DATA / "public" / folder
    names = sorted(p.name for p in base.iterdir() if p.is_dir())
    assert len(names) >= at_least, names
    for name in names:
        assert (base / name / "LICENSE").stat().st_size > 0, name
        notice = (base / name / "NOTICE.md").read_text("utf-8")
        assert re.search(r"commit\s+`[0-9a-f]{40}`", notice), name
        assert f"| `{name}` |" in table, name


def loss_spikes(r: Run) -> list[dict[str, Any]]:
    """The spikes said of the loss and the held-out loss."""
    return [s for s in r.all("spike") if s["metric"] in ("loss", "val_loss")]


def shipped(module: str) -> Any:
    """A module of the shipped ``trainlog/`` package (``"trainlog.base"``): the one that runs
    there, imported here by its name in the package."""
    return importlib.import_module("remotekit.remote." + module)


# ---------------------------------------------------------------------------------------------
# following a log (the API's ``follow_train_log``)


def follow(t: remotekit.Target, path: str, **kw: object) -> tl.LogFollow:
    kw.setdefault("timeout", BOUND_S)
    return tl.follow_train_log(t, path, **kw)  # type: ignore[arg-type]


def until(live: tl.LogFollow, pred: Callable[[tl.Incident], bool]) -> tl.Incident:
    for incident in live:
        if pred(incident):
            return incident
    raise AssertionError(f"the follow ended without it; warnings: {live.warnings}")


def append(log: Path, rows: list[dict[str, object]]) -> None:
    with log.open("a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def once_started(action: Callable[[], None]) -> Callable[[tl.FollowStatus], None]:
    """An on_status that runs ``action`` once, at the first status (the follower runs)."""
    done: list[bool] = []

    def on_status(status: tl.FollowStatus) -> None:
        if not done:
            done.append(True)
            action()

    return on_status


# ---------------------------------------------------------------------------------------------
# a training run (``run --detach``) whose output is its log

#: A training run's script, run detached: ``RUN_SCRIPT GO HOW``. It prints 300 rows of a
#: JSON-lines log at once, waits for the file ``GO`` (at most a minute), prints 40 more with
#: a loss spike at :data:`RUN_SPIKE`, then ends as ``HOW`` says: an exit code, or ``kill`` (it
#: SIGKILLs itself: exit 137, as a run killed by the OOM killer).
RUN_SCRIPT = """\
import json, math, os, signal, sys, time
go, how = sys.argv[1], sys.argv[2]
def row(s):
    loss = 20.5 if s == 320 else 2.0 + 0.02 * math.sin(s * 1.7) + 0.01 * math.cos(s * 0.37)
    print(json.dumps({"step": s, "loss": loss}), flush=True)
for s in range(1, 301):
    row(s)
end = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < end:
    time.sleep(0.02)
for s in range(301, 341):
    row(s)
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(int(how))
"""
RUN_SPIKE = 320
