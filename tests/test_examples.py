"""Every Python example in README.md and docs/*.md runs as written, and prints what it shows.

A ```python block runs in a fresh interpreter, in a directory of its own that holds a
hosts.yaml declaring the names the examples use (``kpro6``, ``ct``, group ``gpu``), once on
each target; the same code must print the same shown output on both:

- ``local``: those names are this machine;
- ``sshd``: they are the real chain of tests/conftest.py, ssh to the test sshd -> ``pct exec
  200`` -> the venv, with ``workdir: /workspace`` (skipped with the reason where sshd or LXC
  cannot run, a failure under CI=true).

An HTML comment on the line before a block narrows that: ``<!-- example: local: WHY -->`` or
``<!-- example: sshd: WHY -->`` runs it on one target, and WHY says which of these holds
(:func:`test_a_block_on_one_target_says_why` checks one is given):

- it names no host: ``remotekit.local_target()`` (README's first example, before any
  hosts.yaml), or no target at all (an invoke collection);
- it works with files or a server it makes here (checkpoints written with torch and scanned
  by their local paths, an HTTP server it starts and forwards to): there they do not exist;
- what it shows is the chain's (``ssh ... -> pct exec 200``), or it writes into the
  container's ``/workspace`` (its workdir; on this machine that would be a folder at the
  root of the file system).

``<!-- example: tested by tests/FILE.py::TEST -->``: that test runs it (it must exist).

README's one shown CLI output, ping refusing an unknown host key, is checked the same way
against the test sshd.

A ```text block after ``<!-- output -->``, right after a python block, is what that block prints
on stdout; ``...`` in it stands for any text (as doctest's ELLIPSIS), for the parts that
differ per run (ports, pids, times, paths).
"""

from __future__ import annotations

import doctest
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import CT, write_inventory
from tests.harness import ROOT, venv_prefix

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NAMES = ("kpro6", "ct")  # the host names the examples use; group gpu: [kpro6]

_BLOCK = re.compile(
    r"(?:<!-- example: (?P<kind>[^>]*?) -->\n)?(?P<indent>[ ]*)```python\n(?P<code>.*?)^(?P=indent)```\n"
    r"(?:\n<!-- output -->\n(?P=indent)```text\n(?P<out>.*?)^(?P=indent)```\n)?",
    re.S | re.M,
)


@dataclass(frozen=True)
class Example:
    where: str  # README.md:74
    kind: str
    code: str
    shown: str | None

    def __str__(self) -> str:
        return self.where


def _dedent(text: str, indent: int) -> str:
    """A block inside a list item, without the item's indent."""
    return "".join(line[indent:] for line in text.splitlines(keepends=True))


def examples() -> list[Example]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in _BLOCK.finditer(text):
            line = text.count("\n", 0, m.start("code"))
            indent = len(m["indent"])
            shown = _dedent(m["out"], indent) if m["out"] is not None else None
            where = f"{path.relative_to(ROOT)}:{line}"
            kind = m["kind"] or "local sshd"
            found.append(Example(where, kind, _dedent(m["code"], indent), shown))
    return found


def test_every_python_block_is_found() -> None:
    counted = sum(p.read_text().count("```python") for p in DOCS)
    assert len(examples()) == counted > 5
    for e in examples():
        assert e.kind == "local sshd" or e.kind.startswith(("local:", "sshd:", "tested by ")), (
            f"{e}: {e.kind!r}"
        )


def targets(example: Example) -> list[str]:
    """Where a block runs: ``local`` and ``sshd``, or the one its comment names."""
    return example.kind.split(":")[0].split() if not example.kind.startswith("tested ") else []


def test_a_block_on_one_target_says_why() -> None:
    for e in examples():
        if len(targets(e)) == 1:
            why = e.kind.split(":", 1)[1].strip()
            assert len(why.split()) >= 3, f"{e}: say why it runs on {targets(e)[0]} only"


def run(example: Example, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(cwd)}
    env.pop("REMOTEKIT_HOSTS", None)
    r = subprocess.run(
        [sys.executable, "-c", example.code],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, f"{example} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout.replace("\r\n", "\n").replace("\r", "")


def check_output(example: Example, printed: str) -> None:
    if example.shown is None:
        return
    # a terminal's output (t.shell) pads lines and ends with blank ones: compare without them
    printed = "\n".join(line.rstrip() for line in printed.splitlines()).strip("\n") + "\n"
    checker = doctest.OutputChecker()
    if not checker.check_output(example.shown, printed, doctest.ELLIPSIS):
        pytest.fail(f"{example} shows:\n{example.shown}\nbut printed:\n{printed}\n({printed!r})")


LOCAL = [e for e in examples() if "local" in targets(e)]
SSHD = [e for e in examples() if "sshd" in targets(e)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("example", LOCAL, ids=str)
def test_a_local_example_runs_as_written(example: Example, tmp_path: Path) -> None:
    hosts = {name: {} for name in NAMES}
    write_inventory(tmp_path / "hosts.yaml", hosts, groups={"gpu": ["kpro6"]})
    check_output(example, run(example, tmp_path))


@pytest.mark.sshd
@pytest.mark.timeout(300)
@pytest.mark.parametrize("example", SSHD, ids=str)
def test_an_example_runs_as_written_through_ssh_and_pct(
    example: Example, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sshd, node = request.getfixturevalue("sshd"), request.getfixturevalue("node")
    ct = sshd.host_yaml(container=CT, pct=str(node.pct), venv=venv_prefix(), workdir="/workspace")
    write_inventory(tmp_path / "hosts.yaml", {n: ct for n in NAMES}, groups={"gpu": ["kpro6"]})
    workspace = request.getfixturevalue("lxc_ct").workspace  # the container's /workspace, here
    before = set(workspace.iterdir())
    try:
        check_output(example, run(example, tmp_path))
    finally:  # the container serves the whole session: leave its /workspace as it was
        for left in set(workspace.iterdir()) - before:
            shutil.rmtree(left) if left.is_dir() and not left.is_symlink() else left.unlink()


def test_an_example_tested_elsewhere_names_a_test_that_exists() -> None:
    for e in examples():
        if e.kind.startswith("tested by "):
            file, _, name = e.kind.removeprefix("tested by ").partition("::")
            assert f"def {name}(" in (ROOT / file).read_text(), f"{e}: no {e.kind}"


@pytest.mark.sshd
@pytest.mark.timeout(120)
def test_readmes_host_key_message_is_what_ping_prints(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """README's first-host section shows `ping` refusing an unknown host key. Run against the
    test sshd (with an empty ~/.ssh/known_hosts), the message is README's with that server's
    address in place of kpro6.lan's."""
    sshd = request.getfixturevalue("sshd")
    text = (ROOT / "README.md").read_text()
    shown = text.split("$ .venv/bin/remotekit ping --host kpro6\n", 1)[1].split("```", 1)[0]
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "known_hosts").write_text("")
    host = {k: v for k, v in sshd.host_yaml().items() if k != "known_hosts"}
    write_inventory(tmp_path / "hosts.yaml", {"kpro6": host})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    env.pop("REMOTEKIT_HOSTS", None)
    r = subprocess.run(
        [sys.executable, "-m", "remotekit", "ping", "--host", "kpro6"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    port = sshd.port
    there = (
        shown.replace("root@kpro6.lan:", f"root@127.0.0.1:{port}:")
        .replace("of kpro6.lan is", f"of [127.0.0.1]:{port} is")
        .replace("ssh-keyscan kpro6.lan", f"ssh-keyscan -p {port} 127.0.0.1")
    )
    example = Example("README.md: ping's host-key message", "sshd", "", there)
    check_output(example, r.stdout)
