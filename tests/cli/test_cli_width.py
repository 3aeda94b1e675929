"""Tables and the lines under them fit the terminal, as kubectl's and rich's do: `remotekit
TASK` with stdout on a pty 80 or 100 columns wide ($COLUMNS, or the terminal's own size), the
real demo and diagnostics on the local target. ``--wide`` keeps every column, a pipe every
cell, and a far side's escapes stay escaped and whole where a cell or a line is cut."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

import remotekit
from tests import trainlog_factory as factory
from tests.harness import ROOT
from tests.smi import make_bin_dir, make_notorch, smi_hosts

SCAN_HEADERS = [
    "CHECKPOINT",
    "STATUS",
    "FORMAT",
    "STEP",
    "EPOCH",
    "PARAMS",
    "SIZE",
    "WEIGHTS NaN/+Inf/-Inf",
    "OPTIM NaN/+Inf/-Inf",
    "MAX|W|",
    "MAX|OPT|",
    "SECONDS",
]
#: The demo's samples and the status a scan gives each.
SAMPLES = {
    "clean": "clean",
    "nan_weights": "bad",
    "inf_optimizer": "bad",
    "truncated": "error",
    "unsafe_global": "error",
}
#: The end of the unsafe_global sample's reason, the longest line under the scan table.
LAST_WORDS = "load it as plain pickle with --unsafe-pickle (runs any code the file holds)"


def env_for(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home), **extra}
    for name in ("REMOTEKIT_HOSTS", "COLUMNS"):
        if name not in extra:
            env.pop(name, None)
    return env


def on_terminal(*args: str, cwd: Path, columns: int, set_columns: bool = True) -> str:
    """What ``remotekit ARGS`` writes to its stdout, a pty ``columns`` wide: told by
    $COLUMNS (the pty itself 200 wide), or with ``set_columns=False`` by the pty's size alone.
    Its stderr (the progress line) goes elsewhere; the command must take its arguments."""
    master, slave = os.openpty()
    size = 200 if set_columns else columns
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, size, 0, 0))
    env = env_for(cwd, **({"COLUMNS": str(columns)} if set_columns else {}))
    argv = [sys.executable, "-m", "remotekit", *args]
    p = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE
    )
    os.close(slave)
    shown = b""
    while chunk := _read(master):
        shown += chunk
    os.close(master)
    err = p.communicate(timeout=120)[1]
    assert p.returncode in (0, 1, 2, 3) and b"No idea" not in err, err.decode(errors="replace")
    return shown.decode(errors="replace").replace("\r\n", "\n")


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the command has closed the terminal
        return b""


def piped(*args: str, cwd: Path, **extra: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "remotekit", *args],
        cwd=cwd,
        env=env_for(cwd, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode in (0, 1, 2, 3), r.stderr
    return r.stdout


def too_long(text: str, width: int) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


def header_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("CHECKPOINT "))


def columns_of(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's sample checkpoints, made once by the demo itself (``--dir``), and beside
    them a training log with two spikes at checkpoint saves (``train.jsonl``)."""
    folder = tmp_path_factory.mktemp("samples")
    piped("demo", "--dir", str(folder / "d"), cwd=folder)
    rows = factory.cached("homogeneous", spikes=(200, 400))
    factory.write_jsonl(rows, folder / "train.jsonl", checkpoints=(200, 400))
    return folder / "d"


@pytest.mark.parametrize(
    ("columns", "set_columns"), [(80, True), (100, True), (100, False)], ids=str
)
def test_the_demo_fits_the_terminal_with_every_sample_and_its_status(
    tmp_path: Path, columns: int, set_columns: bool
) -> None:
    """README's first command: no line wider than the terminal, each sample's row says its
    status, the reasons are there in full (wrapped), and a line says what --wide adds."""
    shown = on_terminal("demo", cwd=tmp_path, columns=columns, set_columns=set_columns)
    assert not too_long(shown, columns), shown
    assert "5/5 samples as expected (exit 0)" in shown, shown
    for name, status in SAMPLES.items():
        row = next(line for line in shown.splitlines() if line.startswith(f"{name}/"))
        assert f" {status} " in row, row
    assert header_line(shown).startswith("CHECKPOINT  ") and " STATUS " in header_line(shown)
    assert "(--wide adds " in shown and "SECONDS)" in shown, shown
    assert LAST_WORDS in " ".join(line.strip() for line in shown.splitlines()), shown


def test_wide_shows_every_column_and_a_pipe_every_cell_whatever_columns_says(
    samples: Path, tmp_path: Path
) -> None:
    """--wide on an 80-column terminal and a pipe with COLUMNS=80 (a script, a log) both get
    every column of the scan, each row on one line, every reason whole on its line."""
    wide = on_terminal("ckpt-scan", "--path", str(samples), "--wide", cwd=tmp_path, columns=80)
    pipe = piped("ckpt-scan", "--path", str(samples), cwd=tmp_path, COLUMNS="80")
    for shown in (wide, pipe):
        assert columns_of(header_line(shown)) == SCAN_HEADERS, shown
        assert any(line.endswith(LAST_WORDS) for line in shown.splitlines()), shown
        assert "--wide adds" not in shown
        for name in SAMPLES:
            row = next(line for line in shown.splitlines() if line.startswith(f"{name}/"))
            assert len(columns_of(row)) == len(SCAN_HEADERS), row
    assert header_line(wide) == header_line(pipe)


@pytest.fixture(scope="module")
def gpu_hosts(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A hosts.yaml whose local host sees the fake nvidia-smi with throttled GPUs."""
    notorch: remotekit.Target = make_notorch(tmp_path_factory.mktemp("notorch"))
    bin_dir = make_bin_dir(tmp_path_factory.mktemp("bin"))
    return smi_hosts(tmp_path_factory.mktemp("gpu"), bin_dir, "throttled", notorch)


TASKS = {
    "ckpt-scan": lambda d, hosts: ["ckpt-scan", "--path", str(d)],
    "ckpt-inspect": lambda d, hosts: [
        "ckpt-inspect",
        "--path",
        str(d / "inf_optimizer/checkpoint.pt"),
    ],
    "ckpt-diff": lambda d, hosts: [
        "ckpt-diff",
        "-a",
        str(d / "clean/checkpoint.pt"),
        "-b",
        str(d / "nan_weights/checkpoint.pt"),
    ],
    "gpu": lambda d, hosts: ["gpu", "--inventory", hosts],
    "ckpt-bisect": lambda d, hosts: ["ckpt-bisect", "--path", str(d)],
    "train-log": lambda d, hosts: ["train-log", "--path", str(d.parent / "train.jsonl")],
}
#: The tasks whose tables have more short columns than 80 columns hold.
SPARING = {"ckpt-scan", "ckpt-inspect", "ckpt-diff", "gpu", "train-log"}


@pytest.mark.parametrize("task", TASKS)
def test_the_diagnostics_tables_fit_80_columns_and_wide_keeps_them_whole(
    task: str, samples: Path, gpu_hosts: str, tmp_path: Path
) -> None:
    """Tables too wide for 80 columns from many short columns (the optimizer's settings, a
    diff's dtype and numel, a GPU's clocks and power, a spike's rule and score) go without
    their spare ones there; the reasons and findings under them wrap."""
    args = TASKS[task](samples, gpu_hosts)
    shown = on_terminal(*args, cwd=tmp_path, columns=80)
    assert not too_long(shown, 80), shown
    wide = on_terminal(*args, "--wide", cwd=tmp_path, columns=80)
    assert too_long(wide, 80), wide  # every column, every line whole: wider than the terminal
    assert ("--wide adds" in shown) == (task in SPARING) and "--wide adds" not in wide


#: A far side's names: an OSC 52 (set the clipboard), a screen clear, a bell and a bidi
#: override, in a path long enough to be cut in the middle on an 80-column terminal.
HOSTILE_DIR = "run_\x1b[2J" + "z" * 40 + "\u202e" + "w" * 10
HOSTILE_FILE = "ckpt_\x1b]52;c;cHduZWQ=\x07" + "x" * 30 + ".pt"


def test_a_hostile_name_stays_escaped_and_whole_where_a_narrow_terminal_cuts_it(
    tmp_path: Path,
) -> None:
    """ckpt-scan of a file whose folder and name hold escapes: on 80 columns its row is cut
    in the middle and its reason wrapped, each escape shown whole (``\\x1b``) or not at
    all, never a raw control character."""
    folder = tmp_path / "scan"
    (folder / HOSTILE_DIR).mkdir(parents=True)
    (folder / HOSTILE_DIR / HOSTILE_FILE).write_bytes(b"not a checkpoint")
    (folder / "plain").mkdir()
    (folder / "plain" / "model.pt").write_bytes(b"not one either")
    shown = on_terminal("ckpt-scan", "--path", str(folder), cwd=tmp_path, columns=80)
    assert not too_long(shown, 80), shown
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", shown), ascii(shown)
    assert all(escape in shown for escape in ("\\x1b", "\\x07", "\\u202e")), shown
    for line in shown.splitlines():
        for at in (m.start() for m in re.finditer(r"\\", line)):
            escape = re.match(r"\\x[0-9a-f]{2}|\\u[0-9a-f]{4}", line[at:])
            assert escape, (line[at : at + 6], shown)
    assert "plain/model.pt" in shown and "Could not check:" in shown


LONG_LINE = (
    "the last words of a step that failed, long enough to pass the edge of a narrow terminal"
)


def test_the_hosts_summary_fits_the_terminal_and_keeps_everything_when_piped_or_wide(
    tmp_path: Path,
) -> None:
    """The summary table of two hosts: on a terminal $COLUMNS wide, its finding wraps
    within its column; piped (scripts) or with --wide, each row is whole on one line."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  a: {}\n  b: {}\n")
    failing = ["run", "--host", "a,b", "--", "sh", "-c", f"echo '{LONG_LINE}'; exit 3"]
    wide_failing = [*failing[:3], "--wide", *failing[3:]]
    shown = on_terminal(*failing, cwd=tmp_path, columns=60)
    table = shown[shown.index("host  ") :].splitlines()
    assert len(table) > 4 and max(len(line) for line in table) <= 60, shown
    pipe = piped(*failing, cwd=tmp_path, COLUMNS="60")
    assert next(line for line in pipe.splitlines() if line.startswith("a  ")).endswith(LONG_LINE)
    wide = on_terminal(*wide_failing, cwd=tmp_path, columns=60)
    assert next(line for line in wide.splitlines() if line.startswith("a  ")).endswith(LONG_LINE)


def test_the_docs_show_the_demos_scan_as_an_80_column_terminal_does(
    samples: Path, tmp_path: Path
) -> None:
    docs = (ROOT / "docs" / "tasks.md").read_text()
    section = docs[docs.index("## Tables on a narrow terminal") :]
    block = section.split("```text\n", 1)[1].split("```", 1)[0]
    shown = on_terminal("ckpt-scan", "--path", str(samples), cwd=tmp_path, columns=80)
    assert shown.startswith(block), shown
