"""The agent's code cache: what a step ships to run (its script, the modules beside it) and
the runner are compiled once per Python and source, and read back by every later agent
(``$XDG_CACHE_HOME/remotekit/code``). What is read from it runs, so a folder that is not
ours alone is never read; an entry that does not load is compiled again; a home with no
room for it leaves every step working as without it.

Each test points ``XDG_CACHE_HOME`` at its own folder before it opens a ``local`` target (the
agent is its child), and shows the cache is read by planting an entry under a source's name
whose code says so.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import stat
import sys
from pathlib import Path

import pytest

import remotekit
from remotekit.result import Script
from tests.harness import make_untrusted, tree, untrusted_cache

pytestmark = pytest.mark.timeout(90)

TAG = f"{sys.implementation.cache_tag}.O{sys.flags.optimize}"


def remote_source(name: str) -> str:
    return remotekit.shipping.source(name).decode()


def entry(folder: Path, source: str) -> Path:
    """Where the agent keeps the code of ``source`` (the hash of the bytecode's version and
    the source, as the agent names it)."""
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER + source.encode()).hexdigest()
    return folder / f"{digest}.{TAG}"


def plant(path: Path, said: str) -> None:
    """An entry whose code prints ``said``: a step that prints it ran what the cache held."""
    path.write_bytes(marshal.dumps(compile(f"print({said!r})", "planted", "exec")))
    path.chmod(0o600)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "remotekit" / "code"


def run(script: str | Script, **kw: object) -> remotekit.Result:
    with remotekit.local_target(agent=True) as t:
        return t.run_python(script, timeout=30, check=False, **kw)


SCRIPT = "import sys\nprint('compiled here', sys.argv[1:])\n"


def test_a_script_compiled_once_is_read_back_by_the_next_agent(cache: Path) -> None:
    assert run(Script(SCRIPT.encode(), name="s.py"), args=["a"]).stdout == "compiled here ['a']\n"
    kept = entry(cache, SCRIPT)
    assert kept.is_file()
    assert (
        stat.S_IMODE(kept.stat().st_mode) == 0o600 and stat.S_IMODE(cache.stat().st_mode) == 0o700
    )
    plant(kept, "from the cache")
    assert run(Script(SCRIPT.encode(), name="s.py")).stdout == "from the cache\n"


def test_modules_a_script_ships_are_compiled_through_the_cache(cache: Path) -> None:
    helper = "def hello():\n    return 'the helper, compiled'\n"
    script = Script(
        b"import helper\nprint(helper.hello())\n",
        name="main.py",
        files={"helper.py": helper.encode()},
    )
    assert run(script).stdout == "the helper, compiled\n"
    kept = entry(cache, helper)
    assert kept.is_file()
    kept.write_bytes(marshal.dumps(compile("def hello():\n    return 'cached'\n", "x", "exec")))
    assert run(script).stdout == "cached\n"


@pytest.mark.parametrize("how", ["group-writable", "world-readable", "another owner", "a link"])
def test_a_cache_folder_that_is_not_ours_alone_is_never_read(
    cache: Path, tmp_path: Path, how: str
) -> None:
    assert run(script_file(tmp_path)).ok
    plant(entry(cache, SCRIPT), "from the cache")
    assert run(script_file(tmp_path)).stdout.startswith("from the cache")  # as it is: read
    if how == "group-writable":
        cache.chmod(0o770)
    elif how == "world-readable":
        cache.chmod(0o755)
    elif how == "another owner":
        os.chown(cache, 65534, 65534)
    else:
        real = cache.with_name("real")
        cache.rename(real)
        cache.symlink_to(real)
    assert run(script_file(tmp_path)).stdout.startswith("compiled here")


UNTRUSTED = untrusted_cache("code")


@pytest.mark.parametrize("how", list(UNTRUSTED))
def test_a_code_cache_not_ours_alone_is_never_read_nor_written(
    cache: Path, tmp_path: Path, how: str
) -> None:
    """As the package cache: the folder and every one above it are checked, before
    anything is made in them, by the one rule both keep to (boot.cache_folder)."""
    assert run(script_file(tmp_path)).ok
    plant(entry(cache, SCRIPT), "from the cache")
    assert run(script_file(tmp_path)).stdout.startswith("from the cache")  # as it is: read
    make_untrusted(cache.parent.parent, UNTRUSTED[how])
    before = tree(cache)
    assert run(script_file(tmp_path)).stdout.startswith("compiled here")
    assert run(Script(b"print('another')")).stdout == "another\n"  # compiled, not kept
    assert tree(cache) == before


def test_an_empty_cache_home_that_others_may_write_gets_no_code_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "shared"
    home.mkdir()
    home.chmod(0o1777)  # even sticky (/tmp): it is the cache's own folder
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    assert run(script_file(tmp_path), args=["d"]).stdout == "compiled here ['d']\n"
    assert list(home.iterdir()) == []


def script_file(tmp_path: Path) -> str:
    path = tmp_path / "s.py"
    path.write_text(SCRIPT)
    return str(path)


def test_an_entry_that_is_not_ours_or_not_a_file_is_not_read(cache: Path, tmp_path: Path) -> None:
    assert run(script_file(tmp_path)).ok
    kept = entry(cache, SCRIPT)
    plant(kept, "from the cache")
    os.chown(kept, 65534, 65534)
    assert run(script_file(tmp_path)).stdout.startswith("compiled here")
    kept.unlink()  # the step wrote its own again; a link in its place is not followed
    (tmp_path / "elsewhere").write_bytes(marshal.dumps(compile("print('linked')", "x", "exec")))
    entry(cache, SCRIPT).unlink(missing_ok=True)
    entry(cache, SCRIPT).symlink_to(tmp_path / "elsewhere")
    assert run(script_file(tmp_path)).stdout.startswith("compiled here")


@pytest.mark.parametrize("damage", [b"", b"\x00garbage", marshal.dumps("not code")])
def test_an_entry_that_does_not_load_is_compiled_again_and_replaced(
    cache: Path, tmp_path: Path, damage: bytes
) -> None:
    assert run(script_file(tmp_path)).ok
    kept = entry(cache, SCRIPT)
    kept.write_bytes(damage)
    assert run(script_file(tmp_path)).stdout.startswith("compiled here")
    assert type(marshal.loads(kept.read_bytes())).__name__ == "code"


def test_a_traceback_from_cached_code_names_the_file_that_ran(tmp_path: Path, cache: Path) -> None:
    script = "x = 1\n\nraise RuntimeError('line three of ' + __file__)\n"
    first = run(Script(script.encode(), name="boom.py"))
    second = run(Script(script.encode(), name="boom.py"))
    assert entry(cache, script).is_file()
    for r in (first, second):
        assert r.exit_code == 1
        shown = r.stderr.splitlines()
        at = next(i for i, ln in enumerate(shown) if 'boom.py", line 3' in ln)
        path = shown[at].split('"')[1]
        assert f"line three of {path}" in r.stderr  # this run's file, not the first run's
        assert "raise RuntimeError" in shown[at + 1]  # its line read from that file


def test_the_runner_and_the_agent_itself_are_kept(cache: Path) -> None:
    """The agent's code too: boot.py compiles it through the cache (~3 ms a start less)."""
    assert run(Script(b"print(1)")).ok
    for name in ("runner.py", "agent.py"):
        assert entry(cache, remote_source(name)).is_file(), name


def test_no_room_for_a_cache_leaves_every_step_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file" / "below"))
    assert run(script_file(tmp_path), args=["b"]).stdout == "compiled here ['b']\n"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # not absolute: ~/.cache, as XDG says
    monkeypatch.setenv("HOME", str(tmp_path / "a-file"))
    assert run(script_file(tmp_path), args=["c"]).stdout == "compiled here ['c']\n"


def test_past_keep_entries_the_oldest_half_goes(cache: Path, tmp_path: Path) -> None:
    assert run(Script(b"pass")).ok
    keep = 256
    old = [cache / f"{i:064x}.{TAG}" for i in range(keep)]
    for i, p in enumerate(old):
        p.write_bytes(b"")
        os.utime(p, (1_000_000 + i, 1_000_000 + i))
    assert run(script_file(tmp_path)).ok  # a new entry: past KEEP
    left = set(os.listdir(cache))
    ours = {
        entry(cache, s).name
        for s in (SCRIPT, "pass", *(remote_source(f) for f in ("runner.py", "agent.py")))
    }
    assert ours <= left and len(left) == keep // 2  # the newest half: ours and the newest old
    assert left - ours == {p.name for p in old[-(keep // 2 - len(ours)) :]}


def test_one_process_per_step_keeps_no_cache(cache: Path, tmp_path: Path) -> None:
    with remotekit.local_target(agent=False) as t:
        assert t.run_python(script_file(tmp_path), timeout=30).ok
    assert not cache.exists()
