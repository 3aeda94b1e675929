"""The far side's cache of the shipped package (``remotekit.remote``, kept by its hash under
``$XDG_CACHE_HOME/remotekit/pkg/<hash>/`` by the runner; :mod:`remotekit.shipping`).

What is read from it runs, so the rules are strict: a folder that is not ours, or that anyone
else may write to (it or a folder above it), is never read from and never written into, and
the step still runs (the package comes with it, into its private temp dir). An entry is whole
or it is not there: a truncated module or a folder the runner did not seal is not trusted,
and the step asks for the package again. A cleared cache costs one resend of the step, never
its output; a home where nothing can be kept costs the package on every step, never a step.

Each test gives the far side a ``python`` of its own, a wrapper that sets the cache's home
(``XDG_CACHE_HOME``, or ``HOME``), here and through the real sshd, on the resident agent and
one process per step. A step's starts are counted with the target's ``trace`` (each start of
a step is traced once: a resend is a second start).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import remotekit
from remotekit import shipping
from remotekit.layers import LOADER
from remotekit.remote import runner
from tests.conftest import held_with_python
from tests.harness import make_untrusted, tree, untrusted_cache

pytestmark = pytest.mark.timeout(120)

HASH = shipping.package().hash
ENTRY = shipping.script("trainlog.py")  # a diagnostic with a stdlib-only far side, quick


@pytest.fixture(params=[None, False], ids=["agent", "per-step"])
def agent(request: pytest.FixtureRequest) -> bool | None:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"step": i, "loss": 3 - i / 10}) + "\n" for i in range(20)))
    return path


@pytest.fixture(params=["local", "ssh"])
def far(
    request: pytest.FixtureRequest, tmp_path: Path, agent: bool | None
) -> Iterator[Callable[[str, str], remotekit.Target]]:
    """``far(var, value)``: a target (here, or through the real sshd) whose Python runs with
    ``var`` (XDG_CACHE_HOME, HOME) set to ``value`` and the other one unset."""
    settings: dict[str, tuple[str, str]] = {}

    def wrapper(name: str) -> str:
        var, value = settings[name]
        other = "HOME" if var == "XDG_CACHE_HOME" else "XDG_CACHE_HOME"
        return f'#!/bin/sh\nunset {other}\nexport {var}={value}\nexec {sys.executable} "$@"\n'

    opened = held_with_python(request, tmp_path, agent, wrapper)
    open_target = next(opened)

    def far_target(var: str, value: str) -> remotekit.Target:
        name = f"t{len(settings)}"
        settings[name] = (var, value)
        return open_target(name)

    try:
        yield far_target
    finally:
        opened.close()


def traced(t: remotekit.Target) -> list[str]:
    """The names of the steps ``t`` starts from now on, one per start."""
    starts: list[str] = []
    t.trace = lambda step, chain: starts.append(step)
    return starts


def analyze(t: remotekit.Target, log: Path) -> str:
    res = t.run_python(ENTRY, [str(log)], timeout=60, check=False)
    assert res.exit_code == 0, res.stderr
    assert '"type":"source"' in res.stdout and "PLANTED" not in res.stdout, res.stdout
    return res.stdout


def plant(entry: Path) -> None:
    """Make the entry point in a kept package say PLANTED, its size unchanged (an entry
    whose every file has the size it was kept with): a step that prints it ran from there."""
    module = entry / "remotekit" / "remote" / "trainlog.py"
    size = module.stat().st_size
    code = b"print('PLANTED')\n"
    module.write_bytes(code + b"#" * (size - len(code) - 1) + b"\n")
    assert module.stat().st_size == size


# -- a cleared cache ------------------------------------------------------------------------------


def test_a_cleared_cache_costs_one_resend_and_no_output(
    far: Callable[[str, str], remotekit.Target], tmp_path: Path, log: Path
) -> None:
    pkg = tmp_path / "xdg" / "remotekit" / "pkg"
    t = far("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    starts = traced(t)
    first = analyze(t, log)  # the runner had no package: it said so, the step went again
    assert len(starts) == 2 and (pkg / HASH).is_dir()
    assert stat.S_IMODE(pkg.stat().st_mode) == 0o700
    del starts[:]
    assert analyze(t, log) == first and len(starts) == 1  # kept: the header alone
    for entry in pkg.iterdir():
        runner.remove_tree(str(entry))
    del starts[:]
    assert analyze(t, log) == first
    assert len(starts) == 2, starts  # one resend, with the package
    assert (pkg / HASH).is_dir()
    del starts[:]
    assert analyze(t, log) == first and len(starts) == 1


# -- folders that are not ours alone --------------------------------------------------------------

UNTRUSTED = untrusted_cache("pkg")


@pytest.mark.parametrize("how", list(UNTRUSTED))
def test_a_cache_not_ours_alone_is_never_read_nor_written(
    far: Callable[[str, str], remotekit.Target], tmp_path: Path, log: Path, how: str
) -> None:
    """A package planted there would run if it were read (shown first, on a folder of ours
    alone); once the folder (or one above it) is not ours alone, the step runs the package
    it sent, and the folder is left exactly as it was."""
    home = tmp_path / "xdg"
    t = far("XDG_CACHE_HOME", str(home))
    analyze(t, log)
    plant(home / "remotekit" / "pkg" / HASH)
    res = t.run_python(ENTRY, [str(log)], timeout=60, check=False)
    assert res.stdout == "PLANTED\n"  # the test can fail: what is there runs when trusted
    t.close()

    make_untrusted(home, UNTRUSTED[how])
    before = tree(home / "remotekit" / "pkg")
    t = far("XDG_CACHE_HOME", str(home))
    starts = traced(t)
    analyze(t, log)
    assert len(starts) == 2  # it said the package is missing, with no cache for it
    del starts[:]
    analyze(t, log)
    assert len(starts) == 1  # and every later step sends it
    assert tree(home / "remotekit" / "pkg") == before


def test_an_empty_cache_home_that_others_may_write_gets_nothing(
    far: Callable[[str, str], remotekit.Target], tmp_path: Path, log: Path
) -> None:
    home = tmp_path / "shared"
    home.mkdir()
    home.chmod(0o1777)  # even sticky (/tmp): it is the cache's own folder
    t = far("XDG_CACHE_HOME", str(home))
    analyze(t, log)
    analyze(t, log)
    assert not (home / "remotekit" / "pkg").exists()


def test_a_link_in_place_of_the_cache_is_not_followed(
    far: Callable[[str, str], remotekit.Target], tmp_path: Path, log: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    t = far("XDG_CACHE_HOME", str(elsewhere))
    analyze(t, log)
    plant(elsewhere / "remotekit" / "pkg" / HASH)
    home = tmp_path / "xdg"
    (home / "remotekit").mkdir(parents=True, mode=0o700)
    (home / "remotekit" / "pkg").symlink_to(elsewhere / "remotekit" / "pkg")
    before = tree(elsewhere)
    analyze(far("XDG_CACHE_HOME", str(home)), log)
    assert tree(elsewhere) == before


# -- a home where nothing can be kept ---------------------------------------------------------------


@pytest.fixture
def read_only_home(small_runs: Path) -> Iterator[Path]:
    """A real read-only filesystem: conftest's small tmpfs, remounted ro (root writes through
    modes)."""
    r = subprocess.run(["mount", "-o", "remount,ro", str(small_runs)], capture_output=True)
    assert r.returncode == 0, r.stderr
    yield small_runs


def test_a_read_only_home_sends_the_package_with_every_step(
    far: Callable[[str, str], remotekit.Target], read_only_home: Path, log: Path
) -> None:
    t = far("HOME", str(read_only_home))
    starts = traced(t)
    first = analyze(t, log)
    assert len(starts) == 2  # missing, and no cache: the engine now sends it every time
    for _ in range(3):
        del starts[:]
        assert analyze(t, log) == first and len(starts) == 1
    assert list(read_only_home.iterdir()) == []


# -- entries that are not whole ---------------------------------------------------------------------


def truncate(entry: Path) -> None:
    module = entry / "remotekit" / "remote" / "protocol.py"
    module.write_bytes(module.read_bytes()[: module.stat().st_size // 2])


def unsealed(entry: Path) -> None:
    """A folder by the package's name that the runner did not make whole (say a copy cut
    short): every file there, but not the runner's word that they are all there."""
    runner.remove_tree(str(entry))
    shipped = dict(shipping.package().files)
    for name, data in list(shipped.items())[: len(shipped) // 2]:
        path = entry / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


@pytest.mark.parametrize("damage", [truncate, unsealed], ids=["truncated", "unsealed"])
def test_an_entry_that_is_not_whole_is_not_trusted(
    far: Callable[[str, str], remotekit.Target],
    tmp_path: Path,
    log: Path,
    damage: Callable[[Path], None],
) -> None:
    pkg = tmp_path / "xdg" / "remotekit" / "pkg"
    t = far("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    first = analyze(t, log)
    damage(pkg / HASH)
    starts = traced(t)
    assert analyze(t, log) == first
    assert len(starts) == 2  # not trusted: the package came again, and replaced it
    whole = dict(shipping.package().files)
    assert (pkg / HASH / "remotekit/remote/protocol.py").read_bytes() == whole[
        "remotekit/remote/protocol.py"
    ]
    del starts[:]
    assert analyze(t, log) == first and len(starts) == 1


# -- the runner's own checks -------------------------------------------------------------------------


def run_runner(
    env: dict[str, str], header: dict[str, object], blob: bytes
) -> subprocess.CompletedProcess[bytes]:
    raw = json.dumps({"nonce": "n", **header}).encode()
    return subprocess.run(
        [sys.executable, "-c", LOADER],
        input=b"%s%d\n%s%s" % (shipping.runner_first(), len(raw), raw, blob),
        capture_output=True,
        env={**os.environ, **env},
        timeout=60,
    )


def test_a_package_that_is_not_what_its_name_says_is_refused(tmp_path: Path, log: Path) -> None:
    """What comes is hashed before it is kept: a blob sent under another package's name
    (a module changed on the way) runs nothing and is not kept."""
    files = dict(shipping.package().files)
    files["remotekit/remote/trainlog.py"] = b"print('PLANTED')\n"
    manifest = json.dumps([[n, len(d)] for n, d in files.items()]).encode()
    blob = zlib.compress(b"".join([manifest, b"\n", *files.values()]))
    header = {"argv": [str(log)], "script": ENTRY.name, "package": HASH, "package_size": len(blob)}
    done = run_runner({"XDG_CACHE_HOME": str(tmp_path / "xdg")}, header, blob)
    assert b"PLANTED" not in done.stdout and done.returncode == 125, done
    assert b"not the package" in done.stderr, done.stderr
    assert list((tmp_path / "xdg" / "remotekit" / "pkg").iterdir()) == []


# -- what is kept ----------------------------------------------------------------------------------


def test_the_eight_most_recently_used_packages_are_kept(
    tmp_path: Path, log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the local target's, too
    pkg = tmp_path / "xdg" / "remotekit" / "pkg"
    pkg.mkdir(parents=True, mode=0o700)
    now = time.time()
    others = [f"{i:032x}" for i in range(10)]
    for age, name in enumerate(others):  # 0 the newest
        (pkg / name / "remotekit").mkdir(parents=True)
        os.utime(pkg / name, (now - 100 - age * 60,) * 2)
    (pkg / ".unpack-old").mkdir()
    os.utime(pkg / ".unpack-old", (now - 7200,) * 2)  # a killed runner's, an hour past
    (pkg / ".unpack-new").mkdir()  # another runner's, under way
    with remotekit.local_target() as t:
        analyze(t, log)  # unpacked: 11 packages, the 3 least recently used go
        assert sorted(p.name for p in pkg.iterdir()) == sorted([HASH, *others[:7], ".unpack-new"])
        os.utime(pkg / HASH, (now - 3600,) * 2)  # the oldest now, until it is used
        analyze(t, log)
        assert (pkg / HASH).stat().st_mtime > now - 60


# -- an entry in use -------------------------------------------------------------------------------
# A developer with an editable install ships a new package per edit: more than PackageCache.KEEP
# of them can be used while a run's supervisor, or a long step, still runs from an old one.


def another_package(tag: str, extra: dict[str, bytes] | None = None) -> shipping.Package:
    """The shipped package with one more module (``tag``), and ``extra`` files: another hash."""
    files = {**dict(shipping.package().files), f"remotekit/remote/{tag}.py": b"pass\n"}
    return shipping.Package(tuple({**files, **(extra or {})}.items()))


def start_runner(
    env: dict[str, str], header: dict[str, object], blob: bytes
) -> subprocess.Popen[bytes]:
    """A runner as the engine starts one, given ``header`` and ``blob``; its stdin stays
    open (EOF on it stops the step)."""
    raw = json.dumps({"nonce": "n", **header}).encode()
    proc = subprocess.Popen(
        [sys.executable, "-c", LOADER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
    )
    assert proc.stdin is not None
    proc.stdin.write(b"%s%d\n%s%s" % (shipping.runner_first(), len(raw), raw, blob))
    proc.stdin.flush()
    return proc


def use_newer_packages(env: dict[str, str], n: int = runner.PackageCache.KEEP + 1) -> None:
    """``n`` other packages used, one step each, each newer than what was used before."""
    for i in range(n):
        pkg = another_package(f"newer{i}_{time.monotonic_ns()}")
        script = next(name for name, _ in pkg.files if "/newer" in name)
        header = {"script": script, "package": pkg.hash, "package_size": len(pkg.blob)}
        proc = start_runner(env, header, pkg.blob)
        code, said = ended(proc)
        assert code == 0, said


def ended(proc: subprocess.Popen[bytes]) -> tuple[int, bytes]:
    """A started runner's exit status and stderr, once its step ended by itself (its stdin
    is closed only then: EOF before would stop the step)."""
    assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
    proc.stdout.read()
    said = proc.stderr.read()
    proc.stdin.close()
    code = proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()
    return code, said


@pytest.mark.parametrize("end", ["exits", "is stopped"])
def test_a_run_s_package_is_kept_while_its_supervisor_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, end: str
) -> None:
    """The supervisor runs from the package for the run's whole life: newer packages used
    meanwhile never take its entry from under it; once the run ended, it is an entry like
    any other."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "XDG_STATE_HOME": str(tmp_path / "state")}
    for var, value in env.items():
        monkeypatch.setenv(var, value)  # the local target's, too
    pkg = tmp_path / "xdg" / "remotekit" / "pkg"
    go = tmp_path / "go"
    with remotekit.local_target() as t:
        run = t.run(
            ["sh", "-c", f"until [ -e {go} ]; do sleep 0.05; done"], detach=True, timeout=30
        )
        assert isinstance(run, remotekit.runs.Run)
        try:
            use_newer_packages(env)
            assert runner.PackageCache.sealed(str(pkg / HASH)), sorted(
                p.name for p in pkg.iterdir()
            )
            if end == "exits":
                go.touch()
                info = run.wait(timeout=30)
                assert (info.state, info.exit_code) == ("exited", 0)
            else:
                info = run.stop(grace=1)
                assert info.state == "stopped"
        finally:
            go.touch()  # a run left by a failure ends
        assert (tmp_path / "state" / "remotekit" / "runs" / run.id / "exit.json").is_file()
        run.rm()
    use_newer_packages(env)
    assert not (pkg / HASH).exists()  # its lock went with the supervisor


def test_a_step_s_package_is_kept_while_the_step_runs(tmp_path: Path) -> None:
    """A long step that imports a module of its package late finds it there, however many
    newer packages were used since it started."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    go = tmp_path / "go"
    old = another_package(
        "longstep",
        {
            "remotekit/remote/longstep.py": b"import os, sys, time\n"
            b"while not os.path.exists(sys.argv[1]):\n    time.sleep(0.05)\n"
            b"import later\nprint(later.WORD)\n",
            "remotekit/remote/later.py": b"WORD = 'imported later'\n",
        },
    )
    header = {
        "argv": [str(go)],
        "script": "remotekit/remote/longstep.py",
        "package": old.hash,
        "package_size": len(old.blob),
    }
    entry = tmp_path / "xdg" / "remotekit" / "pkg" / old.hash
    proc = start_runner(env, header, old.blob)
    try:
        end = time.monotonic() + 30
        while not entry.is_dir() and time.monotonic() < end:
            time.sleep(0.02)
        use_newer_packages(env)
        assert entry.is_dir()
        go.touch()
        assert proc.stdout is not None and proc.stdout.readline() == b"imported later\n"
    finally:
        go.touch()
        code, said = ended(proc)
    assert code == 0, said
