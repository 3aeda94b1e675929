"""`Target.sync` / `remotekit sync`: a local tree pushed into a target through its layers,
and pulled back (`sync NAME:SRC DEST`); `Target.put`/`get` of a folder (as `scp -r`).

The same guarantees are checked on this machine (``local``), through the real sshd into a real
LXC container via the pct stand-in (``ct``), and into a real podman container (``pod``, the
round trip only). The tree there is read back by an independent snapshot script, not by the
code under test.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import remotekit
from remotekit.remote import sync as wire
from remotekit.result import Script
from remotekit.sync import SyncResult
from tests.conftest import held_per_agent, need_program, open_local, write_inventory
from tests.harness import cli
from tests.tree_kit import SNAPSHOT, expected, local_snapshot, make_tree


@dataclass
class Where:
    """A target and a fresh destination directory path there."""

    target: remotekit.Target
    dest: str

    def snapshot(self, path: str | None = None) -> dict[str, list[Any]]:
        r = self.target.run_python(Script(SNAPSHOT, name="snapshot.py"), [path or self.dest])
        return dict(json.loads(r.stdout))

    def sync(self, src: Path, **kw: Any) -> SyncResult:
        return self.target.sync(src, self.dest, **kw)


@pytest.fixture(scope="module")
def pod_targets(
    podman_ctr: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[bool | None], remotekit.Target]]:
    """The podman container's target, one held per ``agent`` for the module."""
    engine = subprocess.run(["which", "podman"], capture_output=True, text=True).stdout.strip()
    inv = write_inventory(
        tmp_path_factory.mktemp("inv") / "hosts.yaml",
        {"pod": {"podman": podman_ctr.running, "engine": engine or "podman", "venv": sys.prefix}},
    )
    yield from held_per_agent(inv, "pod")


@pytest.fixture
def pod_target(
    pod_targets: Callable[[bool | None], remotekit.Target], agent: bool | None
) -> remotekit.Target:
    return pod_targets(agent)


@pytest.fixture(params=["local", "ct"])
def where(request: pytest.FixtureRequest, tmp_path: Path, agent: bool | None) -> Iterator[Where]:
    yield from _where(request, tmp_path, agent)


@pytest.fixture(params=["local", "ct", "pod"])
def where3(request: pytest.FixtureRequest, tmp_path: Path, agent: bool | None) -> Iterator[Where]:
    yield from _where(request, tmp_path, agent)


def _where(request: pytest.FixtureRequest, tmp_path: Path, agent: bool | None) -> Iterator[Where]:
    name = f"sync-{uuid.uuid4().hex[:10]}"
    if request.param == "local":
        with open_local(agent) as t:
            yield Where(t, str(tmp_path / "there" / name))
        return
    t = request.getfixturevalue("ct" if request.param == "ct" else "pod_target")
    w = Where(t, f"/workspace/{name}")
    try:
        yield w
    finally:
        t.resume()
        if request.param == "ct":  # its /workspace is a folder here: faster than rm through pct
            shutil.rmtree(request.getfixturevalue("lxc_ct").workspace / name, ignore_errors=True)
        else:
            t.run(["rm", "-rf", w.dest], check=False)


# -- behaviour on every target -------------------------------------------------------------------


def test_first_sync_copies_the_tree_and_a_second_sends_nothing(
    where3: Where, tmp_path: Path
) -> None:
    src = make_tree(tmp_path / "src")
    seen: list[tuple[int, int]] = []
    first = where3.sync(src, on_progress=lambda done, total: seen.append((done, total)))
    assert where3.snapshot() == expected(src)
    assert len(first.sent) == 7 and first.bytes_sent == sum(
        (src / p).stat().st_size for p in first.sent
    )
    assert set(first.links) == {"pkg/link", "abs-link"}
    assert seen and seen[-1] == (first.bytes_sent, first.bytes_sent)
    assert first.steps == 2  # list, apply

    second = where3.sync(src)
    assert (second.sent, second.links, second.touched, second.deleted) == ((), (), (), ())
    assert second.unchanged == 9 and second.bytes_sent == 0
    assert second.steps == 1  # list only
    assert not second.changed


def test_only_changed_files_travel(where: Where, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    where.sync(src)
    (src / "pkg" / "__init__.py").write_text("x = 22\n")  # other size
    body = (src / "run.sh").read_bytes()
    (src / "run.sh").write_bytes(body)  # same bytes, new mtime: the hash says equal
    os.utime(src / "run.sh", ns=(1, 1_000_000_000))
    (src / "secret.key").chmod(0o640)  # mode only
    r = where.sync(src)
    assert r.sent == ("pkg/__init__.py",)
    assert set(r.touched) == {"run.sh", "secret.key"}
    assert r.hashed == 1 and r.steps == 3  # list, hash, apply
    assert where.snapshot() == expected(src)
    again = where.sync(src)
    assert (again.sent, again.touched, again.hashed) == ((), (), 0)


def test_deletions_only_when_asked_and_never_excluded(where: Where, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    (src / "keep.log").write_text("excluded")
    where.sync(src)
    (src / "blob.bin").unlink()
    (src / "pkg" / "link").unlink()
    (src / "pkg").chmod(0o755)
    for p in (src / "pkg").rglob("*"):
        if p.is_file():
            p.unlink()
    for d in sorted((src / "pkg").rglob("*"), reverse=True):
        d.rmdir()
    (src / "pkg").rmdir()
    (src / "keep.log").unlink()

    kept = where.sync(src, exclude=["*.log"])
    assert kept.deleted == ()
    assert {"blob.bin", "pkg", "keep.log"} <= set(where.snapshot())

    gone = where.sync(src, delete=True, exclude=["*.log"])
    assert set(gone.deleted) == {
        "blob.bin",
        "pkg",
        "pkg/__init__.py",
        "pkg/link",
        "pkg/sub dir",
        "pkg/sub dir/naïve café ü.txt",
    }
    snap = where.snapshot()
    assert "keep.log" in snap  # excluded there too: never deleted
    del snap["keep.log"]
    assert snap == expected(src)


def test_names_that_are_not_utf8_or_hold_newlines_round_trip(where: Where, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    odd = [b"bad\xff byte", b"new\nline", b"-dash", b"tab\there", "ümlaut 日本".encode()]
    for name in odd:
        with open(os.path.join(os.fsencode(src), name), "wb") as f:
            f.write(name)
    first = where.sync(src)
    assert sorted(first.sent) == sorted(os.fsdecode(n) for n in odd)
    assert where.snapshot() == local_snapshot(src)
    assert where.sync(src).unchanged == len(odd)


def test_an_interrupted_sync_leaves_no_partial_file(where: Where, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(b"old" * 1000)
    where.sync(src)
    before = where.snapshot()
    (src / "big.bin").write_bytes(os.urandom(24 << 20))

    def cancel_midway(done: int, total: int) -> None:
        if done >= 4 << 20 and done < total:
            threading.Thread(target=where.target.cancel).start()

    with pytest.raises(remotekit.StepCancelled):
        where.sync(src, on_progress=cancel_midway)
    where.target.resume()
    assert where.snapshot() == before  # the old file whole, no temp file beside it
    where.sync(src)
    assert where.snapshot() == expected(src)


def test_an_interrupted_pull_leaves_no_partial_file_here(where: Where, tmp_path: Path) -> None:
    """A pull cancelled while a body streams in (raw frames) names its step and host; here
    the old file stays whole under its name, and no staging file or temp file is left."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(24 << 20))
    where.sync(src)
    here = tmp_path / "here"
    here.mkdir()
    (here / "big.bin").write_bytes(b"old")

    def cancel_midway(done: int, total: int) -> None:
        if done >= 4 << 20 and done < total:
            threading.Thread(target=where.target.cancel).start()

    with pytest.raises(remotekit.StepCancelled) as stopped:
        where.target.sync(f"{where.target.name}:{where.dest}", here, on_progress=cancel_midway)
    assert (stopped.value.step, stopped.value.host) == (
        f"sync read {where.dest}",
        where.target.name,
    )
    where.target.resume()
    assert [p.name for p in here.iterdir()] == ["big.bin"]
    assert (here / "big.bin").read_bytes() == b"old"


def test_a_stop_signal_mid_file_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    """The script there, stopped while it copies a body into DEST (the body is a FIFO that
    stalls after 1000 bytes), removes its temp file; the file keeps its old content."""
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "f").write_text("old")
    shipped = Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    try:
        (shipped / "d").mkdir()
        os.mkfifo(shipped / "d" / "0")
        (shipped / "ok").write_bytes(b"1")
        (shipped / "plan.json").write_text(json.dumps({"files": [["f", 0, 0o644, 0]]}))
        if os.stat(shipped).st_dev == os.stat(dest).st_dev:
            pytest.skip("needs a body on another filesystem than DEST (a copy, not a rename)")
        writer = os.open(shipped / "d" / "0", os.O_RDWR)
        os.write(writer, b"n" * 1000)
        script = Path(wire.__file__)
        env = {**os.environ, "REMOTEKIT_DIR": str(shipped)}
        proc = subprocess.Popen([sys.executable, str(script), "apply", str(dest)], env=env)
        try:
            wait_until(lambda: any(p.name.startswith(wire.TEMP_PREFIX) for p in dest.iterdir()))
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        finally:
            proc.kill()
            os.close(writer)
        assert [p.name for p in dest.iterdir()] == ["f"]
        assert (dest / "f").read_text() == "old"
    finally:
        shutil.rmtree(shipped)


def wait_until(ready: Callable[[], bool], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize("where", ["ct"], indirect=True)  # the local rows add nothing here
def test_ten_thousand_files_second_run_sends_nothing(where: Where, tmp_path: Path) -> None:
    src = tmp_path / "src"
    for d in range(100):
        (src / f"d{d:03}").mkdir(parents=True)
        for f in range(100):
            (src / f"d{d:03}" / f"f{f:03}.py").write_text(f"# {d} {f}\n")
    first = where.sync(src)
    assert len(first.sent) == 10_000 and len(first.dirs_created) == 100
    second = where.sync(src)
    assert second.sent == () and second.unchanged == 10_000 and second.steps == 1
    (src / "d042" / "f042.py").write_text("changed\n")
    third = where.sync(src)
    assert third.sent == ("d042/f042.py",) and third.unchanged == 9_999


# -- rules, checked here ---------------------------------------------------------------------------


def test_excludes_follow_gitignore_rules(local: remotekit.Target, tmp_path: Path) -> None:
    src = tmp_path / "src"
    for rel in (
        "a.pyc",
        "keep.pyc",
        "top.log",
        "sub/top.log",
        "build/x.o",
        "sub/build/y.o",
        "sub/build.txt",
        "docs/x/notes.md",
        "docs/readme.md",  # docs/**/*.md: "**/" also matches no folder, as in git
        ".git/HEAD",
        "src/mod.py",
    ):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(rel)
    patterns = ["# a comment", "", "*.pyc", "!keep.pyc", "/top.log", "build/", "docs/**/*.md"]
    patterns += [".git/"]
    r = local.sync(src, str(tmp_path / "dst"), exclude=patterns)
    assert sorted(r.sent) == [
        "keep.pyc",
        "src/mod.py",
        "sub/build.txt",
        "sub/top.log",  # /top.log is anchored at the root
    ]


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "hit"),
    [
        ("*.py", "a/b/c.py", False, True),
        ("/a", "a", True, True),
        ("/a", "b/a", True, False),
        ("a/b", "a/b", False, True),
        ("a/b", "x/a/b", False, False),
        ("tmp/", "x/tmp", False, False),
        ("tmp/", "x/tmp", True, True),
        ("**/cache", "deep/er/cache", True, True),
        ("**/cache", "cache", True, True),
        ("logs/**", "logs/a/b", False, True),
        ("a/**/z", "a/z", False, True),
        ("a/**/z", "a/b/c/z", False, True),
        ("f?le[0-9].txt", "file7.txt", False, True),
        ("f[!i]le", "file", False, False),
        (r"\#hash", "#hash", False, True),
        ("name\\ ", "name ", False, True),
    ],
)
def test_exclude_pattern(pattern: str, path: str, is_dir: bool, hit: bool) -> None:
    assert wire.Excludes([pattern]).excluded(path, is_dir) is hit


def test_negation_last_rule_wins() -> None:
    ex = wire.Excludes(["*.txt", "!keep.txt", "keep.txt"])
    assert ex.excluded("keep.txt", False)
    assert not wire.Excludes(["*.txt", "!keep.txt"]).excluded("a/keep.txt", False)


@pytest.mark.parametrize(
    "rel", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a\0b"]
)
def test_unsafe_relative_paths_are_refused(rel: str) -> None:
    with pytest.raises(wire.Unsafe):
        wire.check_rel(rel)


def test_the_script_refuses_paths_that_leave_dest(local: remotekit.Target, tmp_path: Path) -> None:
    """A plan naming paths outside DEST (or through a symlink there) changes nothing outside."""
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (outside / "victim").write_text("safe")
    (dest / "door").symlink_to(outside)
    evil = ["../outside/victim", str(outside / "victim"), "a/../../outside/victim", "door/victim"]
    plan = {
        "remove": evil,
        "links": [[p, "/etc/passwd"] for p in evil],
        "meta": [[p, 0o777, 0] for p in evil],
        "files": [[p, 0, 0o777, 0] for p in evil],
    }
    r = local.run_python(
        wire_script(),
        ["apply", str(dest)],
        files={"plan.json": json.dumps(plan).encode(), "ok": b"1", "d/0": b"pwned"},
        check=False,
    )
    records = [json.loads(line) for line in r.stdout.splitlines()]
    errors = [rec for rec in records if rec["type"] == "error"]
    assert r.exit_code == 1 and len(errors) == 4 * len(evil)
    assert all(e["message"].startswith("refused:") for e in errors)
    assert (outside / "victim").read_text() == "safe" and list(outside.iterdir()) == [
        outside / "victim"
    ]
    assert oct((outside / "victim").stat().st_mode & 0o777) != oct(0o777)
    assert sorted(p.name for p in dest.iterdir()) == ["door"]


def wire_script() -> Script:
    return remotekit.shipping.script("sync.py")


def test_a_symlink_there_is_replaced_not_followed(local: remotekit.Target, tmp_path: Path) -> None:
    src, dest, outside = tmp_path / "src", tmp_path / "dest", tmp_path / "outside"
    (src / "a").mkdir(parents=True)
    (src / "a" / "f").write_text("mine")
    outside.mkdir()
    dest.mkdir()
    (dest / "a").symlink_to(outside)
    with pytest.raises(remotekit.RemotekitError, match="a is a directory here"):
        local.sync(src, str(dest))  # nothing is removed without delete, not even a link
    assert (dest / "a").is_symlink() and list(outside.iterdir()) == []
    assert local.sync(src, str(dest), delete=True).deleted == ("a",)
    assert list(outside.iterdir()) == []
    assert (dest / "a").is_dir() and not (dest / "a").is_symlink()
    assert (dest / "a" / "f").read_text() == "mine"


def test_refusals_name_what_is_wrong(local: remotekit.Target, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "x").write_text("file here")
    with pytest.raises(remotekit.RemotekitError, match="not a local directory"):
        local.sync(tmp_path / "nope", str(tmp_path / "d"))
    (tmp_path / "afile").write_text("")
    with pytest.raises(remotekit.RemotekitError, match="not a directory"):
        local.sync(src, str(tmp_path / "afile"))
    dest = tmp_path / "dest"
    (dest / "x" / "inner").mkdir(parents=True)
    with pytest.raises(remotekit.RemotekitError, match=r"x is a directory there.*--delete"):
        local.sync(src, str(dest))
    assert (dest / "x" / "inner").is_dir()  # nothing removed without delete
    r = local.sync(src, str(dest), delete=True)
    assert r.sent == ("x",) and (dest / "x").read_text() == "file here"


def test_dry_run_changes_nothing(local: remotekit.Target, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    r = local.sync(src, str(tmp_path / "dest"), dry_run=True)
    assert r.dry_run and len(r.sent) == 7 and r.steps == 1
    assert not (tmp_path / "dest").exists()


def test_other_kinds_are_skipped_and_reported(local: remotekit.Target, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    os.mkfifo(src / "pipe")
    (src / "ok").write_text("ok")
    r = local.sync(src, str(tmp_path / "dest"))
    assert r.sent == ("ok",) and r.exit_code == 1
    assert r.skipped == ("pipe: not a regular file, directory or symlink",)


# -- the task --------------------------------------------------------------------------------------


def test_cli_sync_prints_a_summary_and_json(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    dest = tmp_path / "dest"
    r = cli("sync", "--host", "local", str(src), str(dest), "--exclude", "*.bin", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("sent 6 file(s)")
    assert not (dest / "blob.bin").exists()
    (src / "run.sh").unlink()
    r = cli("sync", str(src), str(dest), "--delete", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    result = doc["hosts"][0]["result"]
    assert result["deleted"] == ["run.sh"] and result["sent"] == ["blob.bin"]
    assert result["unchanged"] == 7


def test_the_script_runs_on_python_3_8(tmp_path: Path, agent: bool | None) -> None:
    from tests.harness import PYTHONS

    old = sorted(v for v in PYTHONS if (3, 8) <= v < (3, 9))
    if not old:
        pytest.skip("no Python 3.8 on this machine")
    src = make_tree(tmp_path / "src")
    with open_local(agent, python=PYTHONS[old[0]]) as t:
        where = Where(t, str(tmp_path / "dest"))
        where.sync(src)
        (src / "run.sh").touch()
        (src / "empty.txt").unlink()
        r = where.sync(src, delete=True)
        assert r.deleted == ("empty.txt",) and r.touched == ("run.sh",) and r.steps == 3
        assert where.snapshot() == expected(src)


# -- deletions never take excluded or unknown entries, nothing removed without delete --------------


def test_delete_keeps_a_directory_that_still_holds_excluded_files(
    local: remotekit.Target, tmp_path: Path
) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    (src / "code.py").write_text("x")
    (dest / "runs" / "deep").mkdir(parents=True)
    (dest / "runs" / "model.ckpt").write_text("weeks of training")
    (dest / "runs" / "log.txt").write_text("log")
    (dest / "runs" / "deep" / "old.txt").write_text("old")
    (dest / "gone" / "empty").mkdir(parents=True)
    r = local.sync(src, str(dest), exclude=["*.ckpt"], delete=True)
    assert (dest / "runs" / "model.ckpt").read_text() == "weeks of training"
    assert sorted(r.deleted) == [
        "gone",
        "gone/empty",
        "runs/deep",
        "runs/deep/old.txt",
        "runs/log.txt",
    ]
    assert r.kept == ("runs",)
    assert sorted(p.name for p in dest.iterdir()) == ["code.py", "runs"]
    assert [p.name for p in (dest / "runs").iterdir()] == ["model.ckpt"]

    (src / "runs").write_text("a file here where a directory holds excluded files there")
    with pytest.raises(remotekit.RemotekitError, match="runs"):
        local.sync(src, str(dest), exclude=["*.ckpt"], delete=True)
    assert (dest / "runs" / "model.ckpt").read_text() == "weeks of training"


def test_a_directory_here_does_not_remove_a_file_there_without_delete(
    local: remotekit.Target, tmp_path: Path
) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    (src / "data").mkdir(parents=True)
    (src / "data" / "a").write_text("a")
    (src / "lnk").mkdir()
    dest.mkdir()
    (dest / "data").write_text("precious")
    (dest / "lnk").symlink_to("data")
    with pytest.raises(remotekit.RemotekitError, match=r"data is a directory here.*--delete"):
        local.sync(src, str(dest))
    assert (dest / "data").read_text() == "precious" and (dest / "lnk").is_symlink()
    r = local.sync(src, str(dest), delete=True)
    assert set(r.deleted) == {"data", "lnk"}
    assert (dest / "data" / "a").read_text() == "a" and (dest / "lnk").is_dir()


# -- metadata is set through a descriptor, never through a symlink -------------------------------


def test_modes_are_never_set_through_a_symlink_planted_after_the_listing(
    local: remotekit.Target, tmp_path: Path
) -> None:
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    (dest / "sub").mkdir(parents=True)
    (dest / "f").write_text("f")
    outside.mkdir(mode=0o755)
    (outside / "file").write_text("x")
    (outside / "file").chmod(0o644)
    # the plan was made from a listing that saw a directory and a file; then they are swapped
    plan = {"files": [], "meta": [["f", 0o777, 0]], "dirmodes": [["sub", 0o777]]}
    (dest / "sub").rmdir()
    (dest / "sub").symlink_to(outside)
    (dest / "f").unlink()
    (dest / "f").symlink_to(outside / "file")
    r = local.run_python(
        wire_script(),
        ["apply", str(dest)],
        files={"plan.json": json.dumps(plan).encode(), "ok": b""},
        check=False,
    )
    errors = {
        rec["p"]: rec["message"]
        for rec in map(json.loads, r.stdout.splitlines())
        if rec["type"] == "error"
    }
    assert r.exit_code == 1 and set(errors) == {"f", "sub"}
    assert all("symlink" in m for m in errors.values()), errors
    assert oct(outside.stat().st_mode & 0o777) == oct(0o755)
    assert oct((outside / "file").stat().st_mode & 0o777) == oct(0o644)
    assert (outside / "file").stat().st_mtime_ns != 0


# -- names and modes at the limits ---------------------------------------------------------------


def test_a_255_byte_multibyte_name_syncs(local: remotekit.Target, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    name = "日" * 85  # 255 bytes in UTF-8: the longest name a Linux filesystem takes
    (src / name).write_text("long")
    (src / ("é" + name[:84])).symlink_to(name)
    r = local.sync(src, str(tmp_path / "dest"))
    assert r.sent == (name,) and len(r.links) == 1
    assert (tmp_path / "dest" / name).read_text() == "long"


def test_a_setgid_or_sticky_directory_here_is_in_sync_after_one_run(
    local: remotekit.Target, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    (src / "shared").mkdir(parents=True)
    (src / "shared").chmod(0o2775)
    (src / "tmp").mkdir()
    (src / "tmp").chmod(0o1777)
    local.sync(src, str(tmp_path / "dest"))
    again = local.sync(src, str(tmp_path / "dest"))
    assert again.steps == 1 and not again.changed


# -- no path lands outside DEST, even while a process there swaps its directories ---------------


def test_nothing_lands_outside_dest_while_its_directories_are_swapped_for_symlinks(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """A process there swaps DEST's directories for symlinks to a victim directory as fast as
    it can while syncs write, create, remove and set modes below them: every name is resolved
    from DEST at the moment of use, so the victim never gets a file, a temp file, a directory
    or a mode change, and nothing in it is removed."""
    src, dest, victim = tmp_path / "src", tmp_path / "dest", tmp_path / "victim"
    victim.mkdir()
    victim.chmod(0o755)
    (victim / "precious").write_text("keep")
    (victim / "precious").chmod(0o644)
    swapped = ["a", "a/b"]
    (src / "a" / "b").mkdir(parents=True)

    def fill(round_: int) -> None:
        for d in swapped:
            for old in (src / d).glob("r*"):
                old.unlink() if old.is_file() else shutil.rmtree(old)
            (src / d / f"r{round_}").mkdir()
            for i in range(60):
                (src / d / f"r{round_}-{i}").write_text(f"{round_} {i}\n")
                (src / d / f"r{round_}" / f"{i}").write_text(f"{round_} {i}\n")
            (src / d / f"r{round_}").chmod(0o777)

    fill(0)
    local.sync(src, str(dest))
    stop = threading.Event()

    def swapper() -> None:
        while not stop.is_set():
            for d in swapped:
                real, side = dest / d, dest / (d + ".real")
                try:
                    os.rename(real, side)
                    os.symlink(victim, real)
                    time.sleep(0.0005)  # the symlink stays longer than the real directory
                    os.unlink(real)
                    os.rename(side, real)
                except OSError:
                    pass

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        for round_ in range(1, 40):
            if time.monotonic() > deadline:
                break
            fill(round_)
            # refused or lost names are expected while the directories move
            with contextlib.suppress(remotekit.RemotekitError):
                local.sync(src, str(dest), delete=True)
            assert sorted(p.name for p in victim.iterdir()) == ["precious"], round_
    finally:
        stop.set()
        thread.join(timeout=10)
    assert (victim / "precious").read_text() == "keep"
    assert oct(victim.stat().st_mode & 0o777) == oct(0o755)
    assert oct((victim / "precious").stat().st_mode & 0o777) == oct(0o644)


# -- a partial listing never drives a deletion ---------------------------------------------------


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory an unprivileged user can reach (pytest's tmp_path is root's alone)."""
    d = Path(tempfile.mkdtemp(prefix="rk-sync-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        for p in d.rglob("*"):
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(d)


def as_unprivileged() -> list[str]:
    """The argv prefix that runs a command as a user that modes apply to: nothing when not
    root; as root, a new user namespace (``unshare -U``), where files are nobody's and a
    directory of mode 000 cannot be read."""
    if os.geteuid() != 0:
        return []
    unshare = need_program("unshare")
    locked = Path(tempfile.mkdtemp())
    locked.chmod(0)
    try:
        probe = subprocess.run([unshare, "-U", "ls", str(locked)], capture_output=True, text=True)
    finally:
        locked.rmdir()
    if probe.returncode == 0 or "Permission denied" not in probe.stderr:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but unshare -U cannot drop root here: {probe.stderr.strip()}")
        pytest.skip(f"cannot make a directory unreadable as root here: {probe.stderr.strip()}")
    return [str(unshare), "-U"]


SYNC_AS_USER = """\
import json, sys, remotekit
with remotekit.local_target(**json.loads(sys.argv[3])) as t:
    r = t.sync(sys.argv[1], sys.argv[2], delete=True)
print(json.dumps({"deleted": r.deleted, "findings": r.findings, "refused": r.delete_refused,
                  "exit": r.exit_code}))
"""


def sync_as(
    prefix: list[str], src: Path, dest: str | Path, agent: bool | None
) -> subprocess.CompletedProcess[str]:
    """``sync --delete`` on the local target (its steps on the agent or not, as ``agent``
    says), run under ``prefix`` (see as_unprivileged)."""
    overrides = json.dumps({} if agent is None else {"agent": agent})
    argv = [*prefix, sys.executable, "-c", SYNC_AS_USER, str(src), str(dest), overrides]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=src.parent)


def test_an_unreadable_local_directory_turns_deletion_off(
    local: remotekit.Target, shared_dir: Path
) -> None:
    """``sync --delete`` from a SRC with a directory it cannot read deletes nothing there:
    what is below the unreadable directory is unknown, not absent (rsync does the same)."""
    prefix = as_unprivileged()
    src, dest = shared_dir / "src", shared_dir / "dest"
    (src / "data").mkdir(parents=True)
    (src / "data" / "model.bin").write_bytes(b"weights")
    (src / "code.py").write_text("x = 1\n")
    for d in (src, src / "data"):
        d.chmod(0o777)  # DEST's copies are writable by the unprivileged user, so
    local.sync(src, str(dest))  # a wrong deletion below would succeed
    (dest / "stale.txt").write_text("gone from SRC: deleted only by a whole listing")
    (src / "data").chmod(0)
    out = sync_as(prefix, src, dest, local.spec.agent)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert (dest / "data" / "model.bin").read_bytes() == b"weights"
    assert (dest / "stale.txt").exists()
    assert r["deleted"] == [] and r["exit"] == 1
    assert "SRC here could not be read in full" in r["refused"]
    assert "data: Permission denied" in r["refused"]
    assert any(f.startswith("nothing deleted: ") for f in r["findings"])


def test_an_unreadable_directory_there_turns_deletion_off(
    shared_dir: Path, tmp_path: Path, agent: bool | None
) -> None:
    """The same from the other side: the listing of DEST has an error record (a directory
    the user there cannot read), so the sync deletes nothing and names the path."""
    prefix = as_unprivileged()
    wrapper = tmp_path / "python-unprivileged"
    wrapper.write_text(f'#!/bin/sh\nexec {" ".join(prefix)} {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    inv = write_inventory(tmp_path / "hosts.yaml", {"user": {"python": str(wrapper)}}, agent=agent)
    src, dest = shared_dir / "src", shared_dir / "dest"
    src.mkdir()
    (src / "code.py").write_text("x = 1\n")
    (dest / "locked").mkdir(parents=True)
    (dest / "locked" / "run.log").write_text("there only")
    (dest / "stale.txt").write_text("there only")
    dest.chmod(0o777)
    (dest / "locked").chmod(0)
    with inv.target("user") as t:
        r = t.sync(src, str(dest), delete=True)
    (dest / "locked").chmod(0o755)
    assert (dest / "stale.txt").exists() and (dest / "locked" / "run.log").exists()
    assert r.deleted == () and r.sent == ("code.py",)
    assert r.unlisted == ("locked: Permission denied",)
    assert "DEST there could not be read in full" in r.delete_refused
    assert r.exit_code == 1 and "deletion refused" in r.summary()


def test_a_replacement_that_needs_deletion_is_refused_when_deletion_is_off(
    local: remotekit.Target, shared_dir: Path
) -> None:
    """A directory there where SRC has a file needs a deletion: with the listing partial it
    is refused, naming why, instead of being replaced."""
    prefix = as_unprivileged()
    src, dest = shared_dir / "src", shared_dir / "dest"
    (src / "locked").mkdir(parents=True)
    (src / "x").write_text("a file here")
    (dest / "x" / "inner").mkdir(parents=True)
    (dest / "x" / "inner" / "keep").write_text("there")
    for d in (dest, dest / "x", dest / "x" / "inner"):
        d.chmod(0o777)
    (src / "locked").chmod(0)
    out = sync_as(prefix, src, dest, local.spec.agent)
    assert out.returncode != 0
    assert "x is a directory there but not here" in out.stderr
    assert "not replaced: deletion is off because SRC here could not be read" in out.stderr
    assert (dest / "x" / "inner" / "keep").read_text() == "there"


# -- the other way (a pull) and folders as scp -r ------------------------------------------------


def there_with_tree(where: Where, tmp_path: Path) -> Path:
    """``make_tree`` here, pushed to ``where.dest``; the local source."""
    src = make_tree(tmp_path / "src")
    where.sync(src)
    assert where.snapshot() == expected(src)
    return src


# -- sync pulls ------------------------------------------------------------------------------------


def test_a_pull_copies_the_tree_byte_exact_and_a_second_gets_nothing(
    where: Where, tmp_path: Path
) -> None:
    src = there_with_tree(where, tmp_path)
    here = tmp_path / "pulled" / "deep"  # missing parents are made, as a push makes them there
    seen: list[tuple[int, int]] = []
    t = where.target
    first = t.sync(f"{t.name}:{where.dest}", here, on_progress=lambda d, n: seen.append((d, n)))
    assert first.pulled and first.summary().startswith("got 7 file(s)")
    assert local_snapshot(here) == where.snapshot() == expected(src)
    assert set(first.links) == {"pkg/link", "abs-link"} and first.steps == 2  # list, read
    assert seen and seen[-1] == (first.bytes_sent, first.bytes_sent)
    assert not list(here.rglob(".remotekit-sync-*"))  # the staging folder is gone

    second = t.sync(f"{t.name}:{where.dest}", here)
    assert (second.sent, second.links, second.deleted, second.steps) == ((), (), (), 1)
    assert second.unchanged == 9


def test_a_pull_sends_what_changed_and_deletes_only_when_asked(
    where: Where, tmp_path: Path
) -> None:
    there_with_tree(where, tmp_path)
    t, here = where.target, tmp_path / "here"
    t.sync(f"{t.name}:{where.dest}", here)
    (here / "only-here.txt").write_text("mine")
    t.run(["sh", "-c", f'cd "{where.dest}" && printf changed > run.sh && rm empty.txt'])
    r = t.sync(f"{t.name}:{where.dest}", here)
    assert r.sent == ("run.sh",) and r.deleted == ()
    assert (here / "run.sh").read_text() == "changed" and (here / "empty.txt").exists()
    assert (here / "only-here.txt").exists()
    r = t.sync(f"{t.name}:{where.dest}", here, delete=True, exclude=["only-here.txt"])
    assert r.deleted == ("empty.txt",) and (here / "only-here.txt").exists()
    mine = local_snapshot(here)
    assert mine.pop("only-here.txt")[0] == "f" and mine == where.snapshot()


def test_a_pull_dry_run_changes_nothing_here(local: remotekit.Target, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    r = local.sync(f"local:{src}", tmp_path / "dest", dry_run=True)
    assert r.dry_run and r.pulled and len(r.sent) == 7 and r.steps == 1
    assert r.summary().startswith("would get 7 file(s)")
    assert not (tmp_path / "dest").exists()


def test_the_side_there_is_named_as_rsync_names_it(local: remotekit.Target, tmp_path: Path) -> None:
    from remotekit.sync import host_path

    assert host_path("gpu1:/workspace/out") == ("gpu1", "/workspace/out")
    assert host_path("gpu1:out") == ("gpu1", "out")
    assert host_path("./gpu1:out") is None and host_path("/a/b:c") is None
    assert host_path(":x") is None and host_path("plain") is None
    with pytest.raises(remotekit.RemotekitError, match=r"names the target 'gpu2'.*\./gpu2:/x"):
        local.sync("gpu2:/x", tmp_path / "d")
    with pytest.raises(remotekit.RemotekitError, match="both sides are there"):
        local.sync("local:/x", "local:/y")
    with pytest.raises(remotekit.RemotekitError, match="does not exist there"):
        local.sync(f"local:{tmp_path / 'nope'}", tmp_path / "d")
    (tmp_path / "file").write_text("")
    with pytest.raises(remotekit.RemotekitError, match="not a local directory"):
        local.sync(f"local:{tmp_path}", tmp_path / "file")


def test_a_pull_skips_what_it_cannot_copy(local: remotekit.Target, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    os.mkfifo(src / "pipe")
    (src / "ok").write_text("ok")
    r = local.sync(f"local:{src}", tmp_path / "dest")
    assert r.sent == ("ok",) and r.exit_code == 1
    assert r.skipped == ("pipe: not a regular file, directory or symlink",)
    assert sorted(p.name for p in (tmp_path / "dest").iterdir()) == ["ok"]


# -- get and put of a folder, as scp -r --------------------------------------------------------------


def test_put_and_get_of_a_folder_follow_scp(where: Where, tmp_path: Path) -> None:
    """DEST missing: it becomes the copy; DEST an existing directory (or ending in /): the
    copy goes in it under its own name; a / at the end of SRC changes nothing (scp, cp -r)."""
    t, src = where.target, make_tree(tmp_path / "src")
    r = t.put(src, where.dest, parents=True)  # its parent is missing on the local target
    assert isinstance(r, SyncResult) and len(r.sent) == 7
    assert where.snapshot() == expected(src)
    t.put(f"{src}/", where.dest)  # exists now: into it, as src
    assert where.snapshot(f"{where.dest}/src") == expected(src)
    t.put(src, f"{where.dest}/fresh/", parents=True)
    assert where.snapshot(f"{where.dest}/fresh/src") == expected(src)

    got = tmp_path / "got"
    g = t.get(where.dest + "/src", got)
    assert isinstance(g, SyncResult) and g.pulled
    assert local_snapshot(got) == expected(src)
    t.get(where.dest + "/src/", got)  # exists now: into it, under the name there
    assert local_snapshot(got / "src") == expected(src)
    one = t.get(where.dest + "/run.sh", tmp_path / "one.sh")  # a file: as before
    assert (
        isinstance(one, remotekit.Result)
        and (tmp_path / "one.sh").read_text() == (src / "run.sh").read_text()
    )


def test_a_folder_copy_refuses_as_a_file_copy_does(local: remotekit.Target, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    with pytest.raises(remotekit.RemotekitError, match=r"does not exist there \(put --parents"):
        local.put(src, str(tmp_path / "no" / "such" / "dir"))
    with pytest.raises(remotekit.RemotekitError, match=r"does not exist there \(put --parents"):
        local.put(src, str(tmp_path / "nodir") + "/")
    (tmp_path / "afile").write_text("")
    with pytest.raises(remotekit.RemotekitError, match="exists there and is not a directory"):
        local.put(src, str(tmp_path / "afile"))
    with pytest.raises(remotekit.RemotekitError, match=r"get --parents creates it"):
        local.get(str(src), tmp_path / "no" / "such")
    with pytest.raises(remotekit.RemotekitError, match="mode= is for one file"):
        local.put(src, str(tmp_path / "m"), mode=0o600)
    assert not (tmp_path / "no").exists() and not (tmp_path / "m").exists()


def test_a_pull_refuses_what_a_hostile_far_side_sends(tmp_path: Path) -> None:
    """What a pull writes here comes from there: a listing's entries are checked field by
    field, and bodies (raw frames) must come in the order asked and never past the listed
    size; a frame is checked from its head alone (its kind, its length against the file's
    bytes left and the frame bound), before its payload is taken; one that came short is
    padded (the pack's offsets) and flagged, never installed."""
    from remotekit.sync import Entry, _Bodies, _entry, _Frames

    assert _entry(["f", 3, 1, 0o644]) == Entry("f", 3, 1, 0o644)
    assert _entry(["l", 0, 1, 0o777, "../x"]).link == "../x"  # a link as a link, never followed
    for bad in (["f", -1, 0, 0], ["x", 1, 1, 1], ["f", "1", 0, 0], ["l", 0, 0, 0, "a\0b"]):
        with pytest.raises(ValueError):
            _entry(bad)

    def body(n: int, data: bytes) -> bytes:
        return wire.frame_head(wire.BODY, n, len(data)) + data

    def rec(r: dict[str, Any]) -> bytes:
        data = json.dumps(r).encode()
        return wire.frame_head(wire.RECORD, 0, len(data)) + data

    def read(n: int) -> bytes:
        return rec({"type": "read", "n": n, "ok": True})

    there = {"a": Entry("f", 3), "b": Entry("f", 2)}
    progress = type("P", (), {"add": lambda self, n: None})()

    def frames(folder: Path) -> tuple[_Bodies, _Frames]:
        folder.mkdir()
        got = _Bodies(folder, ["a", "b"], there, packed=2, progress=progress)
        f = _Frames(got)
        f.take = got.record
        return got, f

    for i, (stream, why) in enumerate(
        [
            (body(0, b"abcd"), "more bytes than listed for 'a'"),
            (body(1, b"xy"), "bytes for file 1, not 0"),
            (body(0, b"abc") + read(0) + body(1, b"xy") + read(1) + body(2, b"z"), "file 2"),
            (wire.frame_head(b"Z", 0, 1) + b"z", "a frame of unknown kind b'Z'"),
            (wire.frame_head(wire.RECORD, 0, wire.RECORD_FRAME + 1), "a record of"),
            (wire.frame_head(wire.BODY, 0, 1 << 31), "a body frame of 2147483648 bytes"),
            (
                body(0, b"abc")
                + read(0)
                + body(1, b"xy")
                + read(1)
                + rec({"type": "done"})
                + body(1, b"x"),
                "bytes after the done record",
            ),
            (rec({"type": "read", "n": 1, "ok": True}), "a read record for file 1, not 0"),
            (wire.frame_head(wire.RECORD, 0, 3) + b"{x}", "not a record of sync.py"),
        ]
    ):
        got, f = frames(tmp_path / str(i))
        with pytest.raises(ValueError, match=re.escape(why)):
            f.feed(stream)
        got.close()
    got, f = frames(tmp_path / "cut")
    f.feed(body(0, b"abc")[:-1])
    with pytest.raises(ValueError, match="in the middle of a frame"):
        f.close()
    got.close()
    got, f = frames(tmp_path / "short")
    stream = body(0, b"a") + read(0) + body(1, b"xy") + read(1)
    for at in range(len(stream)):  # a byte at a time: frames split anywhere by the channel
        f.feed(stream[at : at + 1])
    f.close()
    got.close()
    assert bytes(got.ok) == b"01"  # the short one is flagged whatever the far side says
    assert (tmp_path / "short" / "pack").read_bytes() == b"a\0\0xy"
