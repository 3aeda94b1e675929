"""The import graph draws the architecture: no cycle in remotekit/, and ``import remotekit``
loads the engine only (diagnostics, renderer, torch and paramiko load when first used)."""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT

PACKAGE = ROOT / "remotekit"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_in(tree: ast.Module, typing: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs: at its top, and the deferred ones in function bodies.

    A deferred import that closes a cycle is still a cycle in the drawing (``inventory ->
    target -> inventory`` was one, hidden in a method). Imports under ``if TYPE_CHECKING:``
    never run and are left out, unless ``typing``: a module that names another only for its
    types still depends on it (a cycle there is a circle in the design, hidden from Python).
    """
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
        else:
            todo += ast.iter_child_nodes(node)
    return found


def imported_modules(name: str, path: Path, typing: bool = False) -> set[str]:
    """The remotekit modules ``name`` imports.

    ``from remotekit import remote`` names the submodule ``remotekit.remote``; a name that is
    not a submodule names the package itself. Parent packages are not edges: every module
    would then "import" ``remotekit/__init__``.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in imports_in(ast.parse(path.read_text(), str(path)), typing):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
            continue
        base = node.module or ""
        if node.level:  # relative: from . import x / from .a import b
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            out.add(sub if sub in MODULES else base)
    return {m for m in out if m in MODULES and m != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_the_real_edges() -> None:
    """A check of the reader itself: edges it must see, so an empty graph cannot pass."""
    graph = {name: imported_modules(name, path) for name, path in MODULES.items()}
    assert "remotekit.spec" in graph["remotekit.inventory"]
    assert "remotekit.shipping" in graph["remotekit.engine"]  # from remotekit import shipping
    assert "remotekit.target" not in graph["remotekit.diagnostics.system"]  # TYPE_CHECKING
    system = MODULES["remotekit.diagnostics.system"]
    assert "remotekit.target" in imported_modules("remotekit.diagnostics.system", system, True)
    assert "remotekit.transports.ssh" in graph["remotekit.transports"]  # deferred


def test_no_import_cycle_in_remotekit() -> None:
    graph = {name: imported_modules(name, path) for name, path in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_no_import_cycle_even_through_type_checking_imports() -> None:
    """The step engine's modules once formed a circle hidden under ``TYPE_CHECKING`` (each
    helper named the Target it served, the Target imported the helpers)."""
    graph = {name: imported_modules(name, path, typing=True) for name, path in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return list(json.loads(out.stdout))


@functools.cache
def engine() -> frozenset[str]:
    """The engine: the modules ``import remotekit`` loads, and every module they import,
    deferred imports included (the ssh transport, a helper module a Target method uses).
    The package's own ``__init__`` is not followed: its lazy names are for users."""
    todo = [m for m in loaded_after("import remotekit") if m in MODULES and m != "remotekit"]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += imported_modules(name, MODULES[name]) - {"remotekit"}
    return frozenset(seen)


def test_the_engine_never_reaches_the_diagnostics_or_the_renderer() -> None:
    """Diagnostics and rendering sit on top of the engine, never under it."""
    assert {"remotekit.target", "remotekit.transports.ssh"} <= engine()
    above = [
        f"{name} imports {dep}"
        for name in sorted(engine())
        for dep in sorted(imported_modules(name, MODULES[name]))
        if dep.startswith("remotekit.diagnostics") or dep == "remotekit.render"
    ]
    assert above == []


#: "Functions read top to bottom in one screen" (STYLE.md): a longer one wants named phases,
#: or a reason in a ``# long: ...`` comment on the line above its ``def`` (or decorator).
MAX_FUNCTION_LINES = 60


def long_functions(path: Path) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        reason = first >= 2 and lines[first - 2].strip().startswith("# long:")
        if length > MAX_FUNCTION_LINES and not reason:
            out.append(f"{node.name} ({length} lines, line {node.lineno})")
    return out


def test_long_functions_are_found(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n# long: a table\ndef g():\n{body}")
    assert long_functions(tmp_path / "m.py") == [f"f ({MAX_FUNCTION_LINES + 1} lines, line 1)"]


def test_engine_functions_fit_on_a_screen() -> None:
    shipped = "remotekit.remote."  # the shipped scripts have their own rules (Python 3.8)
    modules = sorted(m for m in engine() if not m.startswith(shipped))
    assert [f"{m}: {f}" for m in modules for f in long_functions(MODULES[m])] == []


def test_import_remotekit_loads_the_engine_only() -> None:
    loaded = loaded_after("import remotekit")
    assert "remotekit.target" in loaded  # the probe sees what it should
    heavy = [
        m
        for m in loaded
        if m.startswith(("remotekit.diagnostics", "remotekit.render"))
        or m.split(".")[0] in ("torch", "numpy", "paramiko", "fabric", "invoke")
    ]
    assert heavy == []


@pytest.mark.parametrize(
    "expr",
    ["remotekit.diagnose", "remotekit.diagnostics.system.gpu_status", "remotekit.render.table"],
)
def test_the_lazy_names_still_resolve(expr: str) -> None:
    loaded = loaded_after(f"import remotekit\nassert callable({expr})")
    assert "remotekit.diagnostics.diagnose" in loaded or expr.startswith("remotekit.render")


def test_public_names_are_importable_where_users_import_them() -> None:
    import remotekit
    from remotekit import inventory, spec, target

    for name in remotekit.__all__:
        assert getattr(remotekit, name) is not None, name
    assert inventory.HostSpec is spec.HostSpec and inventory.SSHSpec is spec.SSHSpec
    assert target.Check is remotekit.Check and target.PingReport is remotekit.PingReport


# -- the step engine: one object, handed around ------------------------------------------------

#: The step engine, its facade and the modules that run steps through it.
ENGINE_ROOM = tuple(
    m
    for m in (
        "remotekit.engine",
        "remotekit.agent",
        "remotekit.runs",
        "remotekit.follow",
        "remotekit.target",
        "remotekit.step",
        "remotekit.ping",
        "remotekit.forward",
        "remotekit.sync",
        "remotekit.shell",
        "remotekit.watch",
        "remotekit.fleet",
        "remotekit.transports",
        "remotekit.transports.base",
        "remotekit.transports.local",
        "remotekit.transports.ssh",
    )
    if m in MODULES
)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def foreign_privates(path: Path) -> list[str]:
    """Private attributes a module reads off anything but ``self``, ``cls`` or ``super()``
    (``target._launch``, and ``engine._lock`` even where the module has a ``self._lock`` of
    its own: a name proves nothing about whose it is), except off a module imported from
    outside remotekit (a library's private, named in a comment where it is used); and
    ``from remotekit.<engine module> import _x``."""
    tree = ast.parse(path.read_text())
    outside = {  # names bound to modules from outside remotekit: ``import paramiko``
        (a.asname or a.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for a in node.names
        if not a.name.startswith("remotekit")
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "super":
                continue
            if isinstance(root, ast.Name) and root.id in outside:
                continue
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module in ENGINE_ROOM:
            found += [
                f"line {node.lineno}: import {a.name}" for a in node.names if _private(a.name)
            ]
    return found


def test_foreign_privates_are_found(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "import paramiko\n"
        "from remotekit.target import _Method\n"
        "class A:\n    def __init__(self):\n        self._lock = 1\n"
        "    def g(self):\n        return super()._g(), self._lock, paramiko.T._ciphers\n"
        "def f(a, target, engine):\n    a.__dict__\n    engine._lock\n"
        "    return target._launch('x'), a.b._c\n"
    )
    assert foreign_privates(tmp_path / "m.py") == [
        "line 2: import _Method",
        "line 10: engine._lock",
        "line 11: a.b._c",
        "line 11: target._launch",
    ]


def test_engine_modules_touch_no_other_objects_private_state() -> None:
    """STYLE.md: one object never reaches into another's private state (``target._launch``
    read from the step code): the shared machinery is one object, handed around."""
    assert {"remotekit.step", "remotekit.agent", "remotekit.runs"} <= set(ENGINE_ROOM)
    found = [f"{m} {hit}" for m in ENGINE_ROOM for hit in foreign_privates(MODULES[m])]
    assert found == []


def test_step_options_are_a_frozen_record() -> None:
    import dataclasses

    from remotekit.step import StepRequest

    assert dataclasses.is_dataclass(StepRequest)
    assert StepRequest.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_every_public_call_of_a_target_or_a_run_leaves_through_the_engines_boundary() -> None:
    """Secrets are masked in one place, ``Engine.boundary``: each public method of a Target,
    a run's handle, its log stream and a forward is behind it (``engine.masks_errors``), so
    an error raised after a step (a run's supervisor's words) is masked as a step's is."""
    import inspect

    from remotekit.forward import Forward
    from remotekit.runs import LogStream, Run
    from remotekit.target import Target

    ours = ("remotekit.target", "remotekit.engine", "remotekit.runs", "remotekit.forward")
    bare = [
        f"{cls.__name__}.{name}"
        for cls in (Target, Run, LogStream, Forward)
        for owner in cls.__mro__
        if owner.__module__ in ours
        for name, fn in vars(owner).items()
        if inspect.isfunction(fn)
        and (not name.startswith("_") or name == "__iter__")
        and not fn.__code__.co_qualname.startswith("_behind_boundary.")  # its wrapper
    ]
    assert bare == []


def test_only_a_transport_puts_events_on_its_queue() -> None:
    """A process's events are its transport's to make: a step is cancelled through the
    process's own method, never by pushing a look-alike event into its queue. (The agent's
    steps are Channels the agent makes, as a transport's processes are: it is their transport.)"""
    found = [
        f"{m} line {node.lineno}"
        for m in ENGINE_ROOM
        if not m.startswith("remotekit.transports") and m != "remotekit.agent"
        for node in ast.walk(ast.parse(MODULES[m].read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr in ("put", "put_nowait")
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "events"
    ]
    assert found == []


def test_every_process_a_step_can_run_on_is_a_channel() -> None:
    """The transport contract: whatever a step runs on (a transport's process, a step on the
    agent) is a :class:`Channel`, so its events are the typed ones (mypy holds the queue to
    ``Event``) and cancelling it is the contract's own :meth:`Channel.cancel`."""
    import importlib
    import inspect

    from remotekit.transports.base import Channel

    processes = {
        f"{m}.{name}": cls
        for m in ENGINE_ROOM
        for name, cls in vars(importlib.import_module(m)).items()
        if inspect.isclass(cls)
        and cls.__module__ == m
        and not getattr(cls, "_is_protocol", False)  # the contract itself
        and all(callable(getattr(cls, a, None)) for a in ("close_stdin", "terminate"))
    }
    assert {
        "remotekit.transports.local.LocalProcess",
        "remotekit.transports.ssh.SSHProcess",
        "remotekit.agent.AgentStep",
    } <= set(processes)
    assert [name for name, cls in processes.items() if not issubclass(cls, Channel)] == []


# -- the step header: one record, both ends ------------------------------------------------------

RUNNER = PACKAGE / "remote" / "runner.py"


def test_the_step_header_is_defined_once_for_both_ends() -> None:
    """The laptop's ``StepHeader`` is the runner's own class, a frozen dataclass here whose
    fields are the runner's ``HEADER``; there, run from its source, the class is only that
    table: the runner imports neither dataclasses nor typing for it."""
    import dataclasses

    from remotekit.remote import runner
    from remotekit.step import StepHeader

    assert StepHeader is runner.StepHeader
    assert StepHeader.__dataclass_params__.frozen  # type: ignore[attr-defined]
    defaults = {
        f.name: f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
        for f in dataclasses.fields(StepHeader)
    }
    assert defaults == runner.HEADER
    probe = (
        "import sys\n"
        "ns = {'__name__': 'remotekit_runner'}\n"
        f"exec(compile(open({str(RUNNER)!r}).read(), 'runner', 'exec'), ns)\n"
        "print(sorted(m for m in ('dataclasses', 'typing') if m in sys.modules),"
        " hasattr(ns['StepHeader'], '__dataclass_fields__'), ns['HEADER']['grace'])"
    )
    out = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True)
    assert out.stdout.split() == ["[]", "False", "1.0"], out.stderr


def test_the_step_header_is_built_in_one_place_and_read_in_one_way() -> None:
    """No local module spells the header as a dict (``{"op": ...}``), the runner and the
    agent read its fields through the runner's table (never ``.get`` with a default of their
    own), and the runner's comment names only fields there are."""
    from remotekit.remote.runner import HEADER

    spelled = [
        f"{name} line {node.lineno}"
        for name, path in MODULES.items()
        if not name.startswith("remotekit.remote")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Dict)
        and any(isinstance(k, ast.Constant) and k.value == "op" for k in node.keys)
    ]
    assert spelled == []
    gets = [
        f"{path.name} line {node.lineno}: {ast.unparse(node)}"
        for path in (RUNNER, PACKAGE / "remote" / "agent.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and ast.unparse(node.func.value) in ("h", "header")
    ]
    assert gets == []
    text = RUNNER.read_text()
    comment = text[text.index("# header:") : text.index("# After the payload")]
    named = set(re.findall(r'"(\w+)"', comment)) - {"exec", "put", "get"}
    assert named and named <= set(HEADER), named - set(HEADER)


def test_no_private_name_is_imported_across_modules() -> None:
    """A module's ``_name`` is its own: a name another module imports is shared API, public
    where it is defined (or moved to the module it belongs in). On both sides: the shipped
    package ``remote/`` too, whose stages once imported 73 of each other's private names."""
    found = [
        f"{m} line {node.lineno}: from {'.' * node.level}{node.module or ''} import {a.name}"
        for m, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module != "__future__"
        for a in node.names
        if _private(a.name)
    ]
    assert found == []


TRAINLOG = "remotekit.remote.trainlog"
# What a reader may build on: the records and errors (base), what it reads (source), the line
# and wire formats, a text log's line templates, its sibling readers, and the shipped package's
# own modules outside train-log.
READ_STAGE = {f"{TRAINLOG}.{m}" for m in ("base", "source", "linefmt", "templates", "wire")}
READ_STAGE.add(f"{TRAINLOG}.readers")


def test_a_train_log_reader_imports_no_later_stage() -> None:
    """docs/extending.md: only the read stage knows a format, and a reader knows nothing of
    what comes after it (choose, ingest, series, the analysis, follow, find): it fills the
    ``out`` it is handed. Followed through every module a reader imports."""
    readers = [m for m in MODULES if m.startswith(f"{TRAINLOG}.readers.")]
    assert len(readers) >= 13
    found = []
    for reader in readers:
        seen, todo = set(), [reader]
        while todo:
            mod = todo.pop()
            for dep in imported_modules(mod, MODULES[mod]):
                if dep in seen or not dep.startswith(TRAINLOG + "."):
                    continue
                seen.add(dep)
                if dep in READ_STAGE or dep.startswith(f"{TRAINLOG}.readers."):
                    todo.append(dep)
                else:
                    found.append(f"{reader} -> ... {mod} -> {dep}")
    assert found == []


def dataclasses_in(path: Path) -> dict[str, tuple[str, ...]]:
    """The classes ``path`` declares with ``@dataclass``, each with its own fields' names."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and any(
            "dataclass" in ast.unparse(d) for d in node.decorator_list
        ):
            found[node.name] = tuple(
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            )
    return found


def test_dataclasses_in_finds_names_and_fields(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("@dataclass(frozen=True)\nclass A(Record):\n    x: int\n    y: str = wire()\n")
    assert dataclasses_in(src) == {"A": ("x", "y")}


def test_no_record_that_crosses_is_written_twice() -> None:
    """A record the far side sends is declared once, in ``remote/`` (``remote/records.py``'s
    base, ``from_dict`` / ``to_dict``), and the local side imports it: no dataclass under
    ``diagnostics/`` has the name of one in ``remote/``, or the same fields under another
    name (a mirror class filled by matching annotations)."""
    remote, local = {}, {}
    for m, path in MODULES.items():
        if m.startswith("remotekit.remote."):
            remote.update({n: (m, f) for n, f in dataclasses_in(path).items()})
        elif m.startswith("remotekit.diagnostics."):
            local.update({n: (m, f) for n, f in dataclasses_in(path).items()})
    assert len(remote) >= 14, sorted(remote)  # train-log's records and options at least
    twice = sorted(f"{local[n][0]}.{n} (also {remote[n][0]})" for n in set(local) & set(remote))
    fields_of = {f: f"{m}.{n}" for n, (m, f) in remote.items() if len(f) >= 3}
    mirrors = sorted(
        f"{m}.{n} mirrors {fields_of[f]}" for n, (m, f) in local.items() if f in fields_of
    )
    assert twice + mirrors == []


def test_a_train_log_reader_is_one_module_that_no_other_stage_names() -> None:
    """docs/extending.md: a new format is one module of readers/, defining one ``Reader``.
    No module outside readers/ imports a reader module (they ask the registry, ``readers``,
    and each reader through its hooks), and the stages around the read (find, read,
    follow, the analysis) hold no format's name or words as a value."""
    from remotekit.remote.trainlog.readers import READERS

    readers = [m for m in MODULES if m.startswith(f"{TRAINLOG}.readers.")]
    for reader in readers:
        tree = ast.parse(MODULES[reader].read_text())
        defined = [
            node.name
            for node in tree.body
            if isinstance(node, ast.ClassDef)
            and any(isinstance(b, ast.Name) and b.id == "Reader" for b in node.bases)
        ]
        assert len(defined) == 1, (reader, defined)
    named = [
        f"{m} -> {dep}"
        for m, path in MODULES.items()
        if not m.startswith(f"{TRAINLOG}.readers")
        for dep in imported_modules(m, path, typing=True)
        if dep.startswith(f"{TRAINLOG}.readers.")
    ]
    assert named == []
    formats, whats = {r.FORMAT for r in READERS}, {r.WHAT for r in READERS}
    found = []
    for stage in ("find", "read", "follow", "analyze"):
        tree = ast.parse(MODULES[f"{TRAINLOG}.{stage}"].read_text())
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        found += [
            f"{stage} line {node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            if id(node) not in docs
            and (node.value in formats or any(w in node.value for w in whats))
        ]
    assert found == []


def test_a_test_module_finds_the_repository_through_the_harness() -> None:
    """tests/ mirrors the package, and a test file may move with its module: it finds the
    repository, tests/data and tests/fakes through tests.harness (ROOT, DATA, FAKES), never by
    counting its own folder's parents, and imports no other test module."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "tests/harness.py" or rel.startswith(("tests/fakes/", "tests/data/")):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(
                r"Path\(__file__\)|from tests\.(\w+\.)*test_\w+ import|import tests\..*test_", line
            ):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []
