"""The Python API as scripts and notebooks see it: results that explain themselves.

``str()`` of every report is what the CLI prints for it, ``repr()`` is one line, Jupyter gets
HTML with the findings first, and a fleet outcome says why it failed in one place whichever
layer failed (the transport, the step, the diagnostic's own records).
"""

from __future__ import annotations

import ast
import collections.abc
import functools
import html
import importlib
import importlib.resources
import inspect
import pkgutil
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import remotekit
import remotekit.diagnostics
from remotekit.diagnostics import checkpoints, system
from remotekit.diagnostics.base import Report
from remotekit.result import Shown
from tests.conftest import write_inventory
from tests.harness import cli, rk
from tests.trainlog_kit import append, follow, once_started, until


def reports(t: remotekit.Target, tmp_path: Path) -> list[Report]:
    ck = tmp_path / "ck"
    ck.mkdir()
    torch.save({"w": torch.tensor([1.0, float("nan")])}, ck / "bad.pt")
    return [
        system.environment(t),
        system.disk_usage(t, str(tmp_path)),
        system.processes(t),
        t.ping(),
        checkpoints.scan_checkpoints(t, str(ck)),
    ]


def test_str_is_render_and_repr_is_one_line(local: remotekit.Target, tmp_path: Path) -> None:
    for r in reports(local, tmp_path):
        name = type(r).__name__
        assert str(r) == r.render() and str(r).strip(), name
        assert "\n" not in repr(r) and len(repr(r)) < 200, repr(r)
        assert repr(r).startswith(f"<{name}"), repr(r)


def test_html_shows_the_findings_first_and_escapes(local: remotekit.Target, tmp_path: Path) -> None:
    scan = reports(local, tmp_path)[-1]
    assert scan.findings, scan.render()
    page = scan._repr_html_()
    first = page.index("finding:")
    assert first < page.index("<pre>")
    assert "nan" in page.lower()
    r = local.run(["sh", "-c", "echo '<b>&'; exit 3"], check=False)
    assert "&lt;b&gt;&amp;" in r._repr_html_() and "<b>&" not in r._repr_html_()
    assert str(r).splitlines()[0] == "<b>&" and "exit 3" in str(r).splitlines()[-1]


def test_str_of_a_report_is_what_the_cli_prints(local: remotekit.Target, tmp_path: Path) -> None:
    env = system.environment(local)
    out = cli("env", "--host", "local")
    stable = [ln for ln in env.render().splitlines() if not ln.startswith("memory")]
    for line in stable:
        assert line in out.stdout, (line, out.stdout)


def test_a_failed_outcome_says_why_whatever_layer_failed(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """The README's fleet example printed ``local failed ()``: a diagnostic that failed on
    its own records (no nvidia-smi) had no ``error``; ``reason`` holds it either way."""
    (tmp_path / "bin").mkdir()
    inv = write_inventory(
        tmp_path / "hosts.yaml",
        {
            # says it has GPUs, so no nvidia-smi is a failure, not a "no GPU here" note
            "nogpu": {"env": {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}, "gpus": 1},
            "dead": {"ssh": "root@127.0.0.1:1", "known_hosts": str(tmp_path / "kh")},
        },
    )
    with remotekit.fleet([inv.target("nogpu"), inv.target("dead")]) as f:
        gpu, dead = f.map(lambda t: system.gpu_status(t, timeout=60))
        failed_run, _ = f.run(["sh", "-c", "echo boom >&2; exit 4"], check=False)
    assert gpu.status == "failed" and gpu.error is None
    assert "nvidia-smi" in gpu.reason, gpu.reason
    assert dead.error is not None and "connection refused" in dead.reason
    assert "exited with 4" in failed_run.reason and "boom" in failed_run.reason
    assert str(gpu).startswith("nogpu: failed\n") and "nvidia-smi is not on PATH" in str(gpu)
    ok = remotekit.fleet([inv.target("nogpu")]).run(["true"])[0]
    assert ok.reason == "" and str(ok).startswith("nogpu: ok")
    assert repr(ok) == "<HostOutcome host='nogpu' exit_code=0>"


def test_remotekits_own_steps_are_not_called_commands(
    local: remotekit.Target, tmp_path: Path
) -> None:
    with pytest.raises(remotekit.StepFailed) as info:
        local.get(str(tmp_path / "nothere.pt"), tmp_path / "x.pt")
    msg = str(info.value)
    assert "command get" not in msg
    assert f"get {tmp_path / 'nothere.pt'} {tmp_path / 'x.pt'} failed (exit 1)" in msg
    assert "No such file" in msg


def test_ping_names_the_address_once(tmp_path: Path) -> None:
    inv = write_inventory(
        tmp_path / "hosts.yaml",
        {"dead": {"ssh": "root@127.0.0.1:1", "known_hosts": str(tmp_path / "kh")}},
    )
    with inv.target("dead") as t:
        check = t.ping().checks[0]
    assert check.layer == "ssh root@127.0.0.1:1"
    assert not check.detail.startswith("root@127.0.0.1:1"), check.detail
    assert "connection refused" in check.detail


def test_a_mistyped_timeout_gets_a_did_you_mean(tmp_path: Path) -> None:
    with pytest.raises(remotekit.InventoryError) as info:
        write_inventory(tmp_path / "hosts.yaml", {"h": {"timeouts": {"stpe": 5}}})
    assert "did you mean 'step'" in str(info.value) and "hosts.yaml:" in str(info.value)


def test_the_package_is_typed() -> None:
    assert (importlib.resources.files("remotekit") / "py.typed").is_file()
    assert sys.modules["remotekit"].__all__


def test_a_train_log_report_in_jupyter_shows_its_plot(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """Where the CLI has --plot, the notebook shows the picture: a report with series has a
    PNG in its HTML, after the findings; one without series (points=0) has none."""
    import base64
    import json

    from remotekit.diagnostics import trainlog

    log = tmp_path / "train.jsonl"
    rows = [{"step": s, "loss": 2.0 - s / 400 + (5.0 if s == 300 else 0.0)} for s in range(400)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with_series = trainlog.analyze_train_log(local, str(log), points=500)
    page = with_series._repr_html_()
    assert page.index("finding:") < page.index('<img alt="local:')
    png = base64.b64decode(page.split("data:image/png;base64,", 1)[1].split('"', 1)[0])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    assert "<img" not in trainlog.analyze_train_log(local, str(log))._repr_html_()


# -- every result and report has the three faces ------------------------------------------------

#: Public classes that are not results: what they are instead. Every other class the API hands
#: out (returns, yields, or passes to a callback) must show itself (:class:`Shown`).
NOT_RESULTS = {
    "remotekit.target.Target": "a handle: it runs the steps; their results are checked",
    "remotekit.fleet.Fleet": "a handle over targets: its HostOutcomes are checked",
    "remotekit.forward.Forward": "a handle on a running tunnel (its url is its word)",
    "remotekit.runs.LogStream": "an iterator of a run's output bytes",
    "remotekit.diagnostics.trainlog.follow.LogFollow": "an iterator: its Incidents are checked",
    "remotekit.inventory.Inventory": "configuration: hosts.yaml as types",
    "remotekit.spec.HostSpec": "configuration: one host of hosts.yaml",
    "remotekit.layers.core.Layer": "an argv transform (a hop of the chain)",
    "remotekit.layers.core.Launch": "an argv on its way through the hops",
    "remotekit.diagnostics.base.OutputTail": "an on_output sink",
}


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def public_modules() -> list[types.ModuleType]:
    """``remotekit`` and every module of ``remotekit.diagnostics``: where users import from."""
    found = pkgutil.iter_modules(remotekit.diagnostics.__path__, "remotekit.diagnostics.")
    return [remotekit, *(importlib.import_module(m.name) for m in found)]


@functools.cache
def namespace(module_name: str) -> dict[str, Any]:
    """The module's globals plus the names it imports only for type checking: what its
    (string) annotations mean."""
    module = importlib.import_module(module_name)
    ns = dict(vars(module))
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            exec(compile(ast.Module(node.body, []), str(module.__file__), "exec"), ns)
    return ns


def classes_in(tp: Any) -> set[type]:
    """The classes an annotation names (``X | None``, ``list[X]``, ``Iterator[X]`` ...); of
    a ``Callable[[A, B], R]`` the ones it is handed (A, B)."""
    if typing.get_origin(tp) is None:
        return {tp} if inspect.isclass(tp) else set()
    args = typing.get_args(tp)
    if typing.get_origin(tp) is collections.abc.Callable:
        args = tuple(args[0]) if args and isinstance(args[0], list) else ()
    return set().union(*map(classes_in, args)) if args else set()


def handed_out(fn: Callable[..., Any], module: str) -> set[type]:
    """What ``fn`` returns, and what it hands to its callbacks (``on_check``, ``on_section``)."""
    hints = typing.get_type_hints(fn, globalns=namespace(module))
    out = classes_in(hints.pop("return", None))
    for tp in hints.values():
        for t in (tp, *typing.get_args(tp)):
            if typing.get_origin(t) is collections.abc.Callable:
                out |= classes_in(t)
    return {c for c in out if c.__module__.startswith("remotekit.")}


def parts(cls: type) -> set[type]:
    """The classes a class holds (its fields', attributes' and constructor's types), and
    theirs: shown inside it."""
    found: set[type] = set()
    todo = [cls]
    while todo:
        c = todo.pop()
        hints = []
        for base in c.__mro__:
            ns = namespace(base.__module__) if base.__module__.startswith("remotekit") else {}
            for ann in vars(base).get("__annotations__", {}).values():
                hints.append(eval(ann, ns) if isinstance(ann, str) else ann)
        if inspect.isfunction(vars(c).get("__init__")):
            init = typing.get_type_hints(c.__init__, globalns=namespace(c.__module__))
            hints += init.values()
        for tp in hints:
            for p in classes_in(tp) - found:
                if p.__module__.startswith("remotekit."):
                    found.add(p)
                    todo.append(p)
    return found


def api_methods(cls: type) -> list[tuple[Callable[..., Any], str]]:
    """``cls``'s public methods and properties (and how it iterates), with their modules."""
    out = []
    for c in cls.__mro__:
        for name, v in vars(c).items():
            if name.startswith("_") and name not in ("__iter__", "__next__", "__enter__"):
                continue
            fn = v.fget if isinstance(v, property) else getattr(v, "__func__", v)
            if inspect.isfunction(fn):
                out.append((fn, c.__module__))
    return out


def results() -> dict[type, str]:
    """Every class the public API hands out, each with where: from the public names of
    :func:`public_modules`, what their functions and methods return or pass to callbacks,
    and what those classes' methods do in turn (a report's getter of its own parts aside)."""
    found: dict[type, str] = {}
    todo: list[Any] = [getattr(m, n) for m in public_modules() for n in getattr(m, "__all__", ())]
    seen: set[int] = set()
    while todo:
        obj = todo.pop()
        if id(obj) in seen or (inspect.isclass(obj) and issubclass(obj, BaseException)):
            continue
        seen.add(id(obj))
        if inspect.isfunction(obj):
            calls, own = [(obj, obj.__module__)], set()
        elif inspect.isclass(obj) and obj.__module__.startswith("remotekit."):
            calls, own = api_methods(obj), parts(obj)
        else:
            continue
        for fn, module in calls:
            for cls in handed_out(fn, module) - own:
                found.setdefault(cls, f"{fn.__module__}.{fn.__qualname__}")
                todo.append(cls)
    return found


def faces_missing(cls: type) -> str | None:
    """Why ``cls`` lacks a face (str is render, a one-line repr, HTML), or None."""
    if not issubclass(cls, Shown):
        return "not a remotekit.result.Shown: no str()/repr()/_repr_html_ of its own"
    if cls.render is Shown.render:
        return "no render(): its str() would raise"
    params = getattr(cls, "__dataclass_params__", None)
    if params is not None and params.repr:
        return "a dataclass with repr=True: its repr dumps every field (declare repr=False)"
    return None


def test_the_walk_finds_the_results_and_knows_a_part_from_a_result() -> None:
    from remotekit.diagnostics import diagnose, trainlog

    found = {_name(c) for c in results()}
    for name in ("remotekit.runs.RunInfo", "remotekit.runs.Run", "remotekit.result.Result"):
        assert name in found, name
    assert _name(trainlog.Incident) in found  # what LogFollow.__next__ returns
    assert _name(diagnose.Section) in found  # what diagnose's on_section is handed
    assert _name(trainlog.Series) not in found  # TrainLogReport.series_for: a part of it
    assert faces_missing(trainlog.Spike) and faces_missing(Shown) is not None


def test_every_result_and_report_has_the_three_faces() -> None:
    """str() is render() (the CLI's text), repr() one line, and HTML in Jupyter, for every
    class the public API hands out, every class in ``remotekit.__all__``, and every class in
    the diagnostics' ``__all__`` that is not a part of one of those (a Spike is shown by its
    report). A new result without them fails here; a class that is no result says why in
    NOT_RESULTS."""
    handed = results()
    top = {c: "remotekit.__all__" for c in map(vars(remotekit).get, remotekit.__all__)}
    held = set().union(*(parts(c) for c in [*handed, *top] if inspect.isclass(c)))
    listed = {
        c: f"{m.__name__}.__all__"
        for m in public_modules()[1:]
        for c in (getattr(m, n) for n in getattr(m, "__all__", ()))
        if inspect.isclass(c) and c not in held
    }
    classes = {c: where for c, where in {**listed, **top, **handed}.items() if inspect.isclass(c)}
    missing = [
        f"{_name(c)} (from {where}): {why}"
        for c, where in sorted(classes.items(), key=lambda x: _name(x[0]))
        if not issubclass(c, BaseException)
        and not getattr(c, "_is_protocol", False)
        and _name(c) not in NOT_RESULTS
        and (why := faces_missing(c))
    ]
    assert missing == []
    stale = set(NOT_RESULTS) - {_name(c) for c in classes}
    assert stale == set(), "NOT_RESULTS names classes the API no longer hands out"


def _one_line_repr(value: object, *words: str) -> None:
    text = repr(value)
    assert "\n" not in text and len(text) < 200 and text.startswith("<"), text
    for word in words:
        assert word in text, (word, text)


@pytest.mark.timeout(120)
def test_a_run_its_record_and_its_start_show_themselves_as_the_cli_does(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """``runs`` lists a run's record with the row its str() holds; ``run --detach`` says
    what a Detached's str() says; the handle's faces ask nothing of the host."""
    run = local.run(["sh", "-c", "echo '<b>'; exit 3"], detach=True)
    assert run.result is not None and run.result.detached is not None
    d = run.result.detached
    try:
        info = run.wait()
        row = " ".join(str(info).splitlines()[-1].split())
        listed = rk("runs", cwd=tmp_path).stdout.decode()
        assert row in {" ".join(line.split()) for line in listed.splitlines()}, (row, listed)
        assert str(info).split()[:3] == ["id", "state", "exit"] and " 3 " in row
        _one_line_repr(info, f"id={d.id!r}", "state='exited'", "exit_code=3")
        assert f"<pre>{html.escape(str(info))}</pre>" in info._repr_html_()

        pattern = r"detached: run [0-9a-f]+, pid \d+, log /\S+"
        cli = rk("run", "--detach", "--", "true", cwd=tmp_path).stdout.decode()
        assert re.search(f"^local \\| {pattern}$", cli, re.M), cli
        assert re.fullmatch(pattern, str(d)) and d.id in str(d)
        _one_line_repr(d, f"id={d.id!r}", f"pid={d.pid}")

        assert str(run) == f"run {d.id} on local" and run.render() == str(run)
        _one_line_repr(run, f"id={d.id!r}", "host='local'")
        assert str(run) in run._repr_html_()
    finally:
        run.rm()


def test_a_script_shows_its_name_size_and_source_not_its_bytes() -> None:
    source = "print('<hi>')\n" * 200
    script = remotekit.Script(source, name="hi.py", files={"lib/a.py": b"x = 1\n"})
    _one_line_repr(script, "name='hi.py'", f"{len(source)} bytes", "+1 file(s)")
    assert "print" not in repr(script)
    head, body = str(script).split("\n", 1)
    assert head == f"# hi.py ({len(source)} bytes; beside it: lib/a.py (6 bytes))"
    assert body == source.rstrip()
    assert "&lt;hi&gt;" in script._repr_html_() and "<hi>" not in script._repr_html_()


@pytest.mark.timeout(120)
def test_a_followed_incident_prints_the_line_the_cli_prints(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """``train-log --follow`` prints ``incident.render(tolerance)``: the incident keeps the
    log's tolerance, so its str() is that line (a spike 2 steps after a save is at it)."""
    from remotekit.diagnostics import trainlog

    log = tmp_path / "log.jsonl"
    log.write_text("")
    rows = [{"step": s, "loss": 2.0 + 0.01 * (s % 7)} for s in range(1, 301)]
    spike = [{"step": 301, "loss": 40.0}, *({"step": s, "loss": 2.0} for s in range(302, 330))]
    statuses: list[trainlog.FollowStatus] = []

    def on_status(status: trainlog.FollowStatus) -> None:
        statuses.append(status)
        start(status)

    start = once_started(lambda: append(log, [*rows, *spike]))
    with follow(local, str(log), ckpt_steps=[299], tolerance=5, on_status=on_status) as live:
        inc = until(live, lambda i: i.kind == "spike")
        assert live.source is not None and live.source.tolerance == 5
    assert str(inc) == inc.render(live.source.tolerance) == inc.render()
    assert "checkpoint 299 (+2)" in str(inc), str(inc)
    _one_line_repr(inc, "host='local'", "kind='spike'", "step=301", "metric='loss'")
    assert str(inc) in html.unescape(inc._repr_html_())
    status = statuses[-1]
    assert str(status) == status.line() and str(status).startswith(("step ", "waiting"))
    _one_line_repr(status, f"state={status.state!r}")


def test_sections_and_checks_print_as_diagnose_and_ping_print_them(
    local: remotekit.Target,
) -> None:
    from remotekit.diagnostics.diagnose import Section, render_section

    sections: list[Section] = []
    checks: list[remotekit.Check] = []
    remotekit.diagnose(local, include_ckpt=False, on_section=sections.append)
    report = local.ping(on_check=checks.append)
    for s in sections:
        assert str(s) == render_section(s) and str(s).startswith(f"== {s.name}: {s.status}")
        _one_line_repr(s, f"name={s.name!r}", f"status={s.status!r}")
    assert [str(c) for c in checks] == report.render().splitlines()
    _one_line_repr(checks[0], f"layer={checks[0].layer!r}", "ok=True")


def test_a_diagnostic_run_shows_its_records(local: remotekit.Target) -> None:
    from remotekit.diagnostics.base import run_diagnostic

    source = (
        "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
        "from protocol import Out\nout = Out('probe')\nout.warning('w', 'disk <full>')\n"
        "out.note('n', 'a note')\nsys.exit(out.done())\n"
    )
    run = run_diagnostic(local, remotekit.Script(source, name="probe.py"), step="probe")
    assert str(run).splitlines() == [
        f"probe: exit 1, {len(run.records)} records",
        "warning: disk <full>",
        "note: a note",
    ]
    assert run.findings == ("disk <full>",) and run.errors == ()
    _one_line_repr(run, "host='local'", "exit_code=1", "1 findings")
    page = run._repr_html_()
    assert page.index("finding:</b> disk &lt;full&gt;") < page.index("<pre>")


@pytest.mark.timeout(240)
def test_a_diagnose_report_of_a_run_in_jupyter_shows_the_plot_diagnose_draws(
    local: remotekit.Target, tmp_path: Path
) -> None:
    """``diagnose --run DIR --plot`` draws the run's log; in a notebook, the report made with
    ``points`` shows that picture (the train-log section's) below the findings."""
    import base64
    import json

    log = tmp_path / "run" / "train.jsonl"
    log.parent.mkdir()
    rows = [{"step": s, "loss": 2.0 - s / 400 + (5.0 if s == 300 else 0.0)} for s in range(400)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = remotekit.diagnose(local, run_dir=str(log.parent), include_ckpt=False, points=500)
    page = report._repr_html_()
    assert report.findings, report.render()
    assert (
        page.index("finding:") < page.index("<pre>") < page.index(f'<img alt="local:{log.parent}"')
    )
    png = base64.b64decode(page.split("data:image/png;base64,", 1)[1].split('"', 1)[0])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    without = remotekit.diagnose(local, run_dir=str(log.parent), include_ckpt=False)
    assert "<img" not in without._repr_html_()
