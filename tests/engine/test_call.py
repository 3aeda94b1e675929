"""``Target.call``: a function run there, its value back here (:mod:`remotekit.call`).

Each test writes the caller's own module into a temp folder here (on this process's path, on
no path of the far side's: the far side lacks it), on this machine and through the real sshd
-> the fake ``pct exec 200`` -> the venv, on the resident agent and one process per step.
The hostile far side is a function that rewrites ``call.py``'s own record before it goes
(it runs in that process): what comes back is then anything a broken or hostile host sends.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import remotekit
from remotekit import call as calls
from remotekit.remote import runner
from tests.harness import ROOT, ancestors, processes_with, wait_gone

pytestmark = pytest.mark.timeout(180)

CHECKS = '''
import os, sys

def add(a, b=0, *, scale=1):
    print("adding", a, b)
    print("to stderr", file=sys.stderr)
    return {"sum": (a + b) * scale, "args": [a, b], "none": None, "ok": True, "pi": 3.5}

def echo(*args, **kwargs):
    return [list(args), kwargs]

def boom(text):
    raise ValueError("bad " + text)

def not_json():
    return {1, 2}

def sleeper(marker):
    import subprocess
    subprocess.Popen(["sleep", "600", marker])
    print("started", flush=True)
    import time
    time.sleep(600)

def pid():
    return os.getpid()

STATE = []  # a call's state: it lives as long as the worker
THREADS = os.environ.get("OMP_NUM_THREADS")  # read once, as a module reads it at import

def keep(value):
    STATE.append(value)
    return [STATE, os.getpid()]

def threads():
    return [THREADS, os.environ.get("OMP_NUM_THREADS"), os.getpid()]

def tell(name):
    raise ValueError("the value is " + os.environ[name])

def parent():
    return os.getppid()

def leave(marker):
    """Starts a process of its own session that outlives the call, and returns."""
    import subprocess
    subprocess.Popen(["sleep", marker], start_new_session=True)
    return "left"

def die_soon():
    """Returns its pid; its process is SIGKILLed a moment later (between calls)."""
    import threading, signal
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGKILL)).start()
    return os.getpid()

def forge(kind, path=""):
    """A hostile far side: rewrites call.py's record (this runs in its process, __main__;
    its json.dumps writes the record)."""
    import __main__, base64, pickle
    real = __main__.json.dumps
    def once(text):  # this call's record only: a warm worker serves the next call too
        def forged(obj):
            if not (isinstance(obj, dict) and "ok" in obj):
                return real(obj)  # call.py's check of the value
            __main__.json.dumps = real
            return text
        return forged
    if kind == "pickle":
        data = base64.b64encode(pickle.dumps(Mark(path))).decode()
        __main__.json.dumps = once('{"ok": true, "pickle": "%s"}' % data)
    elif kind == "deep":
        __main__.json.dumps = once("[" * 200000 + "]" * 200000)
    elif kind == "huge":
        return "x" * (65 << 20)
    elif kind == "noise":
        __main__.json.dumps = once('{"ok": false, "type": "T\\u001b]52;c;AAAA\\u0007", '
            '"message": "' + "m" * 100000 + '\\u001b[2J", "traceback": "' + "t\\\\n" * 50000 + '"}')
    return None

class Mark:
    """Loading this here (unpickling) writes a file: the proof a pickle was loaded."""
    def __init__(self, path):
        self.path = path
    def __reduce__(self):
        return (open, (self.path, "w"))
'''


def number() -> str:
    """A unique ``sleep`` argument (the sleeper sleeps 600 + it seconds): its process is
    found by it, and a stop that missed it is seen."""
    return f"{700 + uuid.uuid4().int % 200}.{uuid.uuid4().int % 10**6:06d}"


@pytest.fixture
def checks(tmp_path: Path) -> Iterator[ModuleType]:
    """The caller's own module, ``checks_<id>``, importable here only."""
    name = f"checks_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / f"{name}.py").write_text(CHECKS)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)


@pytest.fixture(params=[None, False], ids=["agent", "per-step"])
def agent(request: pytest.FixtureRequest) -> bool | None:
    return request.param  # type: ignore[no-any-return]


def test_a_value_round_trips_as_json(target: remotekit.Target, checks: ModuleType) -> None:
    lines: list[tuple[str, str]] = []
    value = target.call(
        checks.add, 2, b=5, scale=3, timeout=60, on_output=lambda s, line: lines.append((s, line))
    )
    assert value == {"sum": 21, "args": [2, 5], "none": None, "ok": True, "pi": 3.5}
    # what it printed streamed as output, apart from the value
    assert ("stdout", "adding 2 5") in lines and ("stderr", "to stderr") in lines
    nasty = ["a b", "'\\''", "$(x)", "\x1b[31m", "é\u202e", "", "\n"]
    assert target.call(checks.echo, (1, [2.5, None]), nasty, k={"x": [True]}, timeout=60) == [
        [[1, [2.5, None]], nasty],  # a tuple arrives as a list
        {"k": {"x": [True]}},
    ]


def test_state_lives_in_the_worker_until_a_timeout_ends_it(
    target: remotekit.Target, checks: ModuleType, agent: bool | None
) -> None:
    """With the agent, calls run in a warm worker there: a module global one call set the
    next one sees, in the same process; a timeout kills it, its tree too, and the next call
    gets a fresh one. One process per step: every call fresh."""
    (one, pid1), (two, pid2) = (target.call(checks.keep, n, timeout=60) for n in (1, 2))
    assert pid1 != os.getpid()
    if agent is False:
        assert (one, two, pid1 != pid2) == ([1], [2], True)
        return
    assert (one, two, pid2) == ([1], [1, 2], pid1)
    marker = number()
    with pytest.raises(remotekit.StepTimeout) as info:
        target.call(checks.sleeper, marker, timeout=2)
    assert info.value.step == "call sleeper" and info.value.host == target.name
    assert wait_gone(marker) == []
    three, pid3 = target.call(checks.keep, 3, timeout=60)
    assert three == [3] and pid3 != pid1  # a fresh worker: the state went with the old one


def test_a_worker_serves_only_calls_of_its_environment(
    target: remotekit.Target, checks: ModuleType, agent: bool | None
) -> None:
    """What a module reads at import (OMP_NUM_THREADS) it read under the worker's
    environment: a call whose environment differs gets a worker of its own; one that is
    the same takes the idle worker of its environment again."""
    plain, _, pid = target.call(checks.threads, timeout=60)
    three = target.call(checks.threads, env={"OMP_NUM_THREADS": "3"}, timeout=60)
    again = target.call(checks.threads, timeout=60)
    assert three[:2] == ["3", "3"] and three[2] != pid
    assert again[0] == plain and (again[2] == pid) == (agent is not False)


def test_a_calls_env_secret_is_masked(checks: ModuleType) -> None:
    """A ``secret_env`` value given in a call's ``env=`` reaches the function, and never
    the error its exception raises here."""
    t = remotekit.local_target(secret_env=frozenset({"RK_TOKEN"}))
    with t, pytest.raises(remotekit.RemoteError) as info:
        t.call(checks.tell, "RK_TOKEN", env={"RK_TOKEN": "s3cret-9f2"}, timeout=60)
    assert "s3cret-9f2" not in str(info.value) and "the value is ***" in str(info.value)


def test_a_module_the_far_side_lacks_is_shipped_once(
    target: remotekit.Target, checks: ModuleType
) -> None:
    """The first call of a module's version finds it missing there and sends it; the next
    finds it kept (one start, no bundle behind it)."""
    starts: list[str] = []
    target.trace = lambda step, chain: starts.append(step)
    try:
        assert target.call(checks.pid, timeout=60)
        shipped = len(starts)
        starts.clear()
        target.call(checks.pid, timeout=60)
    finally:
        target.trace = None
    assert shipped == 2 and starts == ["call pid"]  # missing, then sent; then kept


def test_a_module_it_imports_beside_it_ships_too(target: remotekit.Target, tmp_path: Path) -> None:
    """``checks.py`` importing ``helpers.py`` from its folder: both are the caller's own,
    loaded here, and go with the call."""
    tag = uuid.uuid4().hex[:8]
    (tmp_path / f"helpers_{tag}.py").write_text("def twice(v):\n    return 2 * v\n")
    (tmp_path / f"user_{tag}.py").write_text(
        f"import helpers_{tag}\ndef go(v):\n    return helpers_{tag}.twice(v)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        user = importlib.import_module(f"user_{tag}")
        assert target.call(user.go, 21, timeout=60) == 42
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(f"user_{tag}", None)
        sys.modules.pop(f"helpers_{tag}", None)


def test_an_exception_there_is_a_remote_error_with_its_traceback(
    target: remotekit.Target, checks: ModuleType
) -> None:
    with pytest.raises(remotekit.RemoteError) as info:
        target.call(checks.boom, "\x1b]0;title\x07 value", timeout=60)
    e = info.value
    assert e.remote_type == "builtins.ValueError" and e.step == "call boom"
    assert e.remote_message == "bad \x1b]0;title\x07 value"
    assert 'raise ValueError("bad " + text)' in e.remote_traceback
    assert "call.py" not in e.remote_traceback  # the caller's frames, not the machinery's
    assert "\x1b" not in str(e) and "\\x1b]0;title" in str(e)  # shown escaped


def test_a_value_that_is_not_json_there_names_its_type(
    local: remotekit.Target, checks: ModuleType
) -> None:
    with pytest.raises(remotekit.RemoteError, match=r"not JSON \(set\).*pickle=True"):
        local.call(checks.not_json, timeout=60)
    assert local.call(checks.not_json, pickle=True, timeout=60) == {1, 2}


def test_a_timeout_leaves_no_process(target: remotekit.Target, checks: ModuleType) -> None:
    marker = number()
    with pytest.raises(remotekit.StepTimeout) as info:
        target.call(checks.sleeper, marker, timeout=2)
    assert info.value.step == "call sleeper" and "started" in info.value.result.stdout
    assert wait_gone(marker) == []


@pytest.mark.parametrize("warm", [False, True], ids=["first call", "warm"])
def test_cancel_stops_a_call(local: remotekit.Target, checks: ModuleType, warm: bool) -> None:
    """Cancelled as the first call of a worker, and as one that follows a call in it (which
    the agent hands to the worker's process itself)."""
    if warm:
        local.call(checks.pid, timeout=60)
    marker = number()
    threading.Timer(1.0, local.cancel).start()
    try:
        with pytest.raises(remotekit.StepCancelled):
            local.call(checks.sleeper, marker, timeout=60)
    finally:
        local.resume()
    assert wait_gone(marker) == []


@pytest.mark.parametrize("warm", [False, True], ids=["first call", "warm"])
def test_ctrl_c_stops_a_call(target: remotekit.Target, checks: ModuleType, warm: bool) -> None:
    """A KeyboardInterrupt here while the call runs (Ctrl-C; raised from ``on_output`` as
    the function prints): its tree there is stopped, and the target takes the next call."""
    if warm:
        target.call(checks.pid, timeout=60)
    marker = number()

    def interrupt(stream: str, line: str) -> None:
        if line == "started":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        target.call(checks.sleeper, marker, timeout=60, on_output=interrupt)
    assert wait_gone(marker) == []
    assert target.call(checks.echo, 1, timeout=60) == [[1], {}]


# -- refused here, before any step -------------------------------------------------------


def _no_step(t: remotekit.Target) -> list[str]:
    starts: list[str] = []
    t.trace = lambda step, chain: starts.append(step)
    return starts


def test_what_cannot_travel_is_refused_before_any_step(
    local: remotekit.Target, checks: ModuleType
) -> None:
    starts = _no_step(local)

    def nested() -> int:
        return 1

    with pytest.raises(TypeError, match=r"cannot send a lambda.*top level"):
        local.call(lambda: 1)
    with pytest.raises(TypeError, match=r"nested function.*as arguments"):
        local.call(nested)
    with pytest.raises(TypeError, match=r"argument 2\[1\] is a set.*pickle=True"):
        local.call(checks.echo, 1, [2, {3}])
    with pytest.raises(TypeError, match=r"argument k=\['x'\] is a bytes"):
        local.call(checks.echo, k={"x": b"raw"})
    with pytest.raises(TypeError, match=r"key 1 .*JSON keys are str"):
        local.call(checks.echo, {1: 2})
    with pytest.raises(TypeError, match="cannot send a bound method"):
        local.call("x".upper)
    with pytest.raises(TypeError, match="takes a function defined at the top level"):
        local.call(remotekit.Target)  # type: ignore[arg-type]
    assert starts == []


def test_a_main_function_without_source_is_a_clear_error(tmp_path: Path) -> None:
    """``__main__`` whose source cannot be found (``python -c``, as a kernel whose cells
    keep none): the error says where to put the function."""
    code = textwrap.dedent(
        """
        import remotekit
        def f():
            return 1
        try:
            remotekit.local_target().call(f)
        except TypeError as e:
            print(e)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "source of f" in out.stdout and "put it in a .py file" in out.stdout, out


def test_a_main_function_travels_as_its_own_source(tmp_path: Path) -> None:
    """A script's (or a notebook cell's) function: its source alone, not the script's top
    level (which would start the work again there)."""
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """
            import remotekit
            print("top level", flush=True)
            def double(x):
                print("doubling")
                return 2 * x
            with remotekit.local_target() as t:
                print(t.call(double, 21, timeout=60, on_output=remotekit.echo))
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout == "top level\ndoubling\n42\n", out


# -- the far side is hostile ---------------------------------------------------------------


def test_a_pickle_never_loads_without_pickle_true(
    target: remotekit.Target, checks: ModuleType, tmp_path: Path
) -> None:
    mark = tmp_path / "loaded"
    with pytest.raises(remotekit.RemoteError, match=r"sent a pickle.*never loads"):
        target.call(checks.forge, "pickle", str(mark), timeout=60)
    assert not mark.exists()


def test_a_hostile_value_is_bounded(local: remotekit.Target, checks: ModuleType) -> None:
    with pytest.raises(remotekit.RemoteError, match="nested too deep"):
        local.call(checks.forge, "deep", timeout=60)
    with pytest.raises(remotekit.RemoteError, match=r"more than \d+"):
        local.call(checks.forge, "huge", timeout=120)
    with pytest.raises(remotekit.RemoteError) as info:
        local.call(checks.forge, "noise", timeout=60)
    e = info.value
    assert len(e.remote_message) <= calls.MAX_MESSAGE
    assert len(e.remote_traceback) <= calls.MAX_TRACEBACK
    assert "\x1b" not in str(e) and "\x07" not in str(e)


def test_pieces_past_the_bound_are_dropped_here() -> None:
    """A far side that ignores the header's bound is held to it here too."""
    got = calls._Value(10)
    got.take("QUFBQUFB")  # 6 bytes
    got.take("QUFBQUFB")
    assert got.bad.startswith("the value there is more than 10") and got.parts == []
    bad = calls._Value(10)
    bad.take({"not": "base64"})
    assert bad.bad


# -- a fleet -----------------------------------------------------------------------------


def test_a_fleet_calls_every_host(checks: ModuleType) -> None:
    hosts = [remotekit.local_target(), remotekit.local_target()]
    with remotekit.Fleet(hosts) as f:
        outcomes = f.call(checks.add, 1, b=2, timeout=60)
        failed = f.call(checks.boom, "x", timeout=60)
    assert [o.value["sum"] for o in outcomes] == [3, 3]
    assert all(isinstance(o.error, remotekit.RemoteError) for o in failed)
    assert all(o.status == "failed" and "bad x" in o.reason for o in failed)


# -- the link or the agent gone in the middle of a call ------------------------------------


def _running(look: remotekit.Target, pid: int) -> bool:
    r = look.run(["cat", f"/proc/{pid}/stat"], check=False, timeout=20)
    return r.ok and r.stdout.rsplit(")", 1)[1].split()[0] != "Z"


def _catch(out: list[object], fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        out.append(fn(*args, **kwargs))
    except BaseException as exc:
        out.append(exc)


@pytest.mark.parametrize("how", ["dropped link", "agent killed"])
def test_a_call_in_a_worker_dies_with_its_link_or_agent(
    inventory: remotekit.Inventory, checks: ModuleType, how: str
) -> None:
    """A dropped connection (the sshd process serving it killed) or SIGKILL of the agent
    while a call runs in a warm worker: the call is a ConnectionLost naming the host, and
    nothing of it stays there: its tree, its worker, the worker's process that ran it."""
    with inventory.target("ct", agent=True) as t, inventory.target("ct", agent=False) as look:
        worker = t.call(checks.parent, timeout=60)  # the worker: its executor's parent
        pid = int(t.run(["sh", "-c", "awk '{print $4}' /proc/$PPID/stat"], timeout=20).stdout)
        marker = number()  # sleep's own argument (600 + it seconds): a process to look for
        out: list[object] = []
        th = threading.Thread(
            target=lambda: _catch(out, t.call, checks.sleeper, marker, timeout=60)
        )
        th.start()
        end = time.monotonic() + 20
        while not processes_with(marker):
            assert time.monotonic() < end, ("the call never started", out)
            time.sleep(0.05)
        if how == "dropped link":
            here = processes_with(marker)[0]
            session = next(p for p, cmd in ancestors(here) if cmd.startswith("sshd:"))
            os.kill(session, signal.SIGKILL)
        else:
            look.run(["kill", "-9", str(pid)], timeout=20)
        th.join(30)
        assert out and isinstance(out[0], remotekit.ConnectionLost), out
        assert out[0].host == "ct" and out[0].step == "call sleeper"
        assert wait_gone(marker, 8) == []
        end = time.monotonic() + 8  # its pid is the container's: looked at from there
        while _running(look, worker):
            assert time.monotonic() < end, "the worker outlived its agent"
            time.sleep(0.1)
        assert t.call(checks.echo, 1, timeout=60) == [[1], {}]


def test_both_sides_name_the_value_pipe_and_the_order_alike() -> None:
    """``call.py`` travels alone (it imports nothing of remotekit): its names for the value
    pipe's variable and the order's file are held equal to the runner's and the laptop's."""
    from remotekit.remote import call as far
    from remotekit.remote import runner

    assert far.VALUE_FD == runner.VALUE_FD and calls.ORDER == far.ORDER == runner.CALL_ORDER


def test_a_workers_package_is_kept_while_it_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The package a warm worker's calls run from stays in the cache there while the worker
    lives, however many newer packages were used since: a later call that imports a module
    of it late finds it (the cache's lock is held from the first call until the worker's
    process ends, not only while a call runs)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the local target's
    folder = tmp_path / "mine"
    folder.mkdir()
    name = f"late_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(
        f"import os\n\ndef first():\n    return os.getpid()\n\n"
        f"def late():\n    import {name}_helper\n    return [{name}_helper.WORD, os.getpid()]\n"
    )
    (folder / f"{name}_helper.py").write_text("WORD = 'imported later'\n")
    newer = [f"newer_{uuid.uuid4().hex[:8]}_{i}" for i in range(runner.PackageCache.KEEP + 1)]
    for other in newer:  # each its own package (of its own folder: nothing else ships)
        (tmp_path / other).mkdir()
        (tmp_path / other / f"{other}.py").write_text("def one():\n    return 1\n")
    sys.path[:0] = [str(folder), *(str(tmp_path / other) for other in newer)]
    try:
        mod = importlib.import_module(name)
        importlib.import_module(f"{name}_helper")  # one's own, beside it: it ships too
        entry = tmp_path / "xdg" / "remotekit" / "pkg" / calls.bundle_of(mod.first).package.hash
        with remotekit.local_target(agent=True) as t, remotekit.local_target(agent=False) as u:
            pid = t.call(mod.first, timeout=60)
            assert entry.is_dir()
            for other in newer:  # newer packages, used by runners of their own
                assert u.call(importlib.import_module(other).one, timeout=60) == 1
            assert entry.is_dir()
            assert t.call(mod.late, timeout=60) == ["imported later", pid]
    finally:
        for path in [str(folder), *(str(tmp_path / other) for other in newer)]:
            sys.path.remove(path)
        for gone in (name, f"{name}_helper", *newer):
            sys.modules.pop(gone, None)


def test_a_warm_call_that_leaves_a_process_has_its_tree_stopped(
    target: remotekit.Target, checks: ModuleType, agent: bool | None
) -> None:
    """A call in a warm worker returns and leaves a process of its own session running: the
    worker stops it, and the next call runs in a fresh process."""
    first = target.call(checks.pid, timeout=60)
    assert target.call(checks.pid, timeout=60) == first or agent is False
    marker = number()
    assert target.call(checks.leave, marker, timeout=60) == "left"
    assert wait_gone(marker) == []
    assert target.call(checks.pid, timeout=60) != first


def test_a_warm_call_does_not_wake_its_worker(checks: ModuleType) -> None:
    """Once a worker's process runs calls of a package, the agent hands it the next ones
    itself: the worker (that process's parent, there to stop its tree) sleeps through them.
    With the agent only: one process per call has no worker."""
    with remotekit.local_target() as local:
        _sleeps_through_warm_calls(local, checks)


def _sleeps_through_warm_calls(local: remotekit.Target, checks: ModuleType) -> None:
    worker = local.call(checks.parent, timeout=60)
    local.call(checks.parent, timeout=60)

    def switches() -> int:
        status = Path(f"/proc/{worker}/status").read_text()
        return sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line)

    before, end = -1, time.monotonic() + 10
    while switches() != before and time.monotonic() < end:  # what it does after a call, done
        before = switches()
        time.sleep(0.2)
    for _ in range(20):
        assert local.call(checks.parent, timeout=60) == worker
    assert switches() - before < 5


def test_a_worker_whose_process_died_between_calls_takes_the_next_one(
    target: remotekit.Target, checks: ModuleType, agent: bool | None
) -> None:
    """The process a warm worker runs calls in is killed between two calls (the OOM
    killer, a kill by hand there): the next call runs, in a fresh one."""
    gone = target.call(checks.die_soon, timeout=60)
    time.sleep(1.5)  # its kill comes 0.2 s after it returned
    assert target.call(checks.echo, 1, timeout=60) == [[1], {}]
    assert target.call(checks.pid, timeout=60) != gone


def test_a_file_changed_here_since_the_last_call_ships_again(
    tmp_path: Path, target: remotekit.Target
) -> None:
    """A call takes its function's bundle again while nothing it ships changed here; a
    module of one's own beside it rewritten since (not re-imported here) ships as it is now,
    and the call there finds it."""
    name = f"word_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "words"
    folder.mkdir()
    (folder / f"{name}.py").write_text(
        f"def word():\n    import {name}_text\n    return {name}_text.WORD\n"
    )
    text = folder / f"{name}_text.py"
    text.write_text("WORD = 'one'\n")
    sys.path.insert(0, str(folder))
    try:
        mod = importlib.import_module(name)
        importlib.import_module(f"{name}_text")
        assert target.call(mod.word, timeout=60) == "one"
        assert calls.bundle_of(mod.word) is calls.bundle_of(mod.word)
        text.write_text("WORD = 'two, longer'\n")
        assert target.call(mod.word, timeout=60) == "two, longer"
    finally:
        sys.path.remove(str(folder))
        for gone in (name, f"{name}_text"):
            sys.modules.pop(gone, None)
