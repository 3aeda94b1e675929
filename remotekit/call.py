"""A function run there, its value back here: :meth:`Target.call <remotekit.target.Target.call>`.

A call is a step (:mod:`remotekit.step`) that runs ``remote/call.py`` there: it imports the
function by module and qualname, calls it with the arguments, and writes what came of it (the
value, or the exception with its traceback) on a pipe of its own that the runner sends back
on control lines apart from the output (header ``value``). What the function prints is the
step's output, as any step's.

What travels:

- **the function's name**, never its code: ``module`` and ``qualname``. A lambda, a closure, a
  nested function or a bound method has none the far side could find: refused here.
- **the caller's own module**: a module this Python did not get from its standard library or
  an installed package (``checks.py`` beside a notebook, a package of one's own, whole),
  with the modules of one's own imported here from its folder (what it imports beside it),
  goes in the call's *bundle*, with ``call.py`` at its root, named by the hash of its files
  and kept in the runner's package cache there as the shipped package is
  (:mod:`remotekit.shipping`): it travels only when the runner says it lacks it. The far
  side imports it from there, before its own path. A function of ``__main__`` (a script's, a
  notebook cell's) travels as its own source (``inspect.getsource``), alone: it imports what
  it uses inside itself, as the names it would take from the rest of ``__main__`` (other
  cells, the script's imports) are not there. The standard library and installed packages
  are the far side's.
- **the arguments and the value**: JSON (``tuple``, ``list``, ``dict`` with ``str`` keys,
  ``str``, ``int``, ``float``, ``bool``, ``None``; a tuple arrives as a list), checked here
  before anything runs; or, with ``pickle=True``, pickles both ways. Without it nothing from
  there is ever unpickled here: a pickle that comes is refused unread.

With the agent, a call step (header ``worker``) runs in a warm worker there
(:class:`remotekit.remote.agent.Worker`), whose process keeps what calls import and set until
a stop kills its tree; one process per step without the agent. Its timeout, Ctrl-C and
cancel are any step's, named ``call <qualname>``.
"""

from __future__ import annotations

import base64
import binascii
import inspect
import json
import os
import site
import sys
import sysconfig
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remotekit.errors import RemoteError, RemotekitError, StepFailed
from remotekit.remote.call import ORDER
from remotekit.shipping import Package, PackageScript, source
from remotekit.step import OutputCallback, StepRequest, run_step

if TYPE_CHECKING:
    from remotekit.engine import Engine

__all__ = ["MAX_SHIPPED", "MAX_VALUE", "Bundle", "bundle_of", "call", "check_json"]

#: The most bytes of a value (its JSON or pickle, as it travels) a call takes back.
MAX_VALUE = 64 << 20
#: The most bytes of the caller's own files one call ships (a package of one's own, whole).
MAX_SHIPPED = 16 << 20
#: How deep a JSON argument may nest (as deep as Python's json reads back).
MAX_DEPTH = 500
#: The entry point's name at the bundle's root, and the name a ``__main__`` travels under.
ENTRY = "__remotekit_call__.py"
MAIN = "__remotekit_main__"
#: The most characters of the far side's type, message and traceback kept.
MAX_TYPE, MAX_MESSAGE, MAX_TRACEBACK = 200, 8192, 64 * 1024

_JSON_LEAVES = (str, int, float, bool, type(None))


def check_json(value: Any, where: str, depth: int = 0) -> None:
    """Refuse ``value`` unless it is JSON (see the module doc), naming ``where`` it is."""
    if depth > MAX_DEPTH:
        raise TypeError(f"{where} nests deeper than {MAX_DEPTH} levels: not sent as JSON")
    if isinstance(value, _JSON_LEAVES):
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_json(item, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{where} has a key {key!r} ({type(key).__name__}): JSON keys are str; "
                    "convert it, or call with pickle=True"
                )
            check_json(item, f"{where}[{key!r}]", depth + 1)
        return
    raise TypeError(
        f"{where} is a {type(value).__name__}, which is not JSON (a tuple, list, dict, str, "
        "int, float, bool or None); convert it, or call with pickle=True"
    )


# -- what ships --------------------------------------------------------------------------


@dataclass(frozen=True)
class Bundle:
    """What a call runs from there: the module and qualname to import, and the package
    (``call.py`` and the caller's own files) that holds them."""

    module: str
    qualname: str
    package: Package = field(repr=False)


@cache
def _installed_roots() -> tuple[str, ...]:
    """The folders this Python's standard library and installed packages are in."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(getattr(site, "getsitepackages", list)())
    user = getattr(site, "getusersitepackages", lambda: None)()
    if user:
        roots.add(user)
    return tuple(os.path.realpath(r) + os.sep for r in roots)


@cache
def _is_installed(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real.startswith(root) for root in _installed_roots())


def bundle_of(fn: Any) -> Bundle:
    """What a call of ``fn`` ships (see the module doc); a function the far side could not
    find by its name is refused here, saying what to do instead."""
    name = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    owner = getattr(fn, "__self__", None)
    if inspect.ismethod(fn) or (inspect.isbuiltin(fn) and not _is_module(owner)):
        raise TypeError(
            f"call() cannot send a bound method ({fn!r}): its object does not travel. "
            "Define a function at the top level of a module that takes what it needs as "
            "arguments"
        )
    if not (inspect.isfunction(fn) or inspect.isbuiltin(fn)):
        raise TypeError(
            f"call() takes a function defined at the top level of a module, not "
            f"{type(fn).__name__} {fn!r}: define a def in a .py file (or a notebook cell) "
            "and pass it; arguments go after it"
        )
    if not isinstance(name, str) or not isinstance(module, str):
        raise TypeError(f"call(): {fn!r} has no module and qualname to find it by there")
    if "<" in name:
        lam = getattr(fn, "__name__", "") == "<lambda>"
        what = "a lambda" if lam else "a nested function (or closure)"
        raise TypeError(
            f"call() cannot send {what} ({module}.{name}): the far side finds a function by "
            "its module and name, and this one has none it can import. Define it with def at "
            "the top level of a module (or a notebook cell), and pass what it closed over "
            "as arguments"
        )
    if _reach(sys.modules.get(module), name) is not fn:
        raise TypeError(
            f"call(): {module}.{name} is not the function given (a decorator that does not "
            "keep its name, or a module changed since): call one that import finds by name"
        )
    hit = _BUNDLES.pop((module, name), None)
    if hit is not None and hit[0] is fn and hit[1] == _stamp(hit[2]):
        _BUNDLES[module, name] = hit  # the most recently used last
        return hit[3]
    files, there, paths = _own_files(fn, module)
    pkg = Package(tuple(sorted([(ENTRY, source("call.py")), *files])))
    bundle = Bundle(there, name, pkg)
    if module != "__main__":  # a cell's function is its source now: read each time
        _BUNDLES[module, name] = (fn, _stamp(paths), paths, bundle)
        while len(_BUNDLES) > KEEP_BUNDLES:
            del _BUNDLES[next(iter(_BUNDLES))]
    return bundle


#: The bundle of each function called lately (KEEP_BUNDLES of them, each up to MAX_SHIPPED
#: of files): (the function, its stamp, the files it ships, the Bundle), taken again while
#: the function, the modules imported here and the files' sizes and mtimes are those it was
#: made with (a warm call does not read and hash them again).
_BUNDLES: dict[tuple[str, str], tuple[Any, tuple[Any, ...], tuple[Path, ...], Bundle]] = {}
KEEP_BUNDLES = 16


def _stamp(paths: tuple[Path, ...]) -> tuple[Any, ...]:
    """What a bundle was made from, as it is now: how many modules are imported here (one
    of one's own imported since may ship with it) and each file's size and mtime."""
    stamps: list[Any] = [len(sys.modules)]
    for path in paths:
        try:
            st = path.stat()
            stamps.append((st.st_size, st.st_mtime_ns))
        except OSError:
            stamps.append(None)
    return tuple(stamps)


def _is_module(obj: Any) -> bool:
    return obj is None or inspect.ismodule(obj)


def _reach(obj: Any, qualname: str) -> Any:
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


def _own_files(fn: Any, module: str) -> tuple[list[tuple[str, bytes]], str, tuple[Path, ...]]:
    """The caller's files the call ships, the name the module has there, and the files'
    paths here: the function's module (its top package, whole), and the modules of one's
    own imported here from the same folder (what it imports beside it: ``helpers.py`` next
    to ``checks.py``)."""
    if module == "__main__":
        return (*_main_files(fn), ())
    where = _own_folder(sys.modules.get(module.split(".")[0]))
    if where is None:
        return [], module, ()  # the standard library or an installed package: the far side's
    files = [
        pair
        for name, mod in sorted(sys.modules.copy().items())
        if "." not in name and name != "__main__" and _own_folder(mod) == where
        for pair in _files_of(name, mod)
    ]
    total = sum(p.stat().st_size for _, p in files)
    if total > MAX_SHIPPED:
        raise RemotekitError(
            f"call(): the modules of {where} a call of {module} ships are {total} bytes, "
            f"more than a call ships ({MAX_SHIPPED}); install them there, or call a "
            "function of a smaller module"
        )
    return [(rel, _read(p)) for rel, p in files], module, tuple(p for _, p in files)


def _own_folder(mod: Any) -> Path | None:
    """The folder a top-level module of one's own was imported from; None for the standard
    library, an installed package, a built-in one."""
    origin = getattr(mod, "__file__", None)
    if mod is None or not isinstance(origin, str) or _is_installed(origin):
        return None
    path = Path(origin)
    return path.parent.parent if getattr(mod, "__path__", None) else path.parent


def _files_of(name: str, mod: Any) -> list[tuple[str, Path]]:
    """A top-level module's source files, by their paths there: a package's, all of them."""
    path = Path(mod.__file__)
    if not getattr(mod, "__path__", None):
        return [(name + ".py", path)] if path.suffix == ".py" else []
    root = path.parent
    return [
        (f"{root.name}/{p.relative_to(root).as_posix()}", p)
        for p in sorted(root.rglob("*.py"))
        if "__pycache__" not in p.parts
    ]


def _main_files(fn: Any) -> tuple[list[tuple[str, bytes]], str]:
    """A ``__main__`` function (a script's, a notebook cell's) travels as its own source:
    the rest of ``__main__`` (its imports of remotekit, its work) is the caller's."""
    try:
        text = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise TypeError(
            f"call(): the source of {fn.__qualname__} (defined in __main__) cannot be found "
            f"({exc}); put it in a .py file beside the notebook or script and import it "
            "from there"
        ) from None
    return [(MAIN + ".py", text.encode())], MAIN


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise RemotekitError(f"call(): cannot read {path}: {exc.strerror}") from exc


# -- the call ----------------------------------------------------------------------------


class _Value:
    """The pieces of the value as they come (``value`` control records), held to MAX_VALUE;
    anything else the far side says there is kept as what went wrong (:attr:`bad`)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0
        self.bad = ""

    def take(self, data: Any) -> None:
        if self.bad:
            return
        if isinstance(data, dict) and isinstance(data.get("over"), int):
            self.bad = f"the value there is {data['over']} bytes, more than {self.limit}"
            return
        try:
            piece = base64.b64decode(data, validate=True) if isinstance(data, str) else None
        except (binascii.Error, ValueError):
            piece = None
        if piece is None:
            self.bad = "a piece of the value that is not base64"
            return
        self.size += len(piece)
        if self.size > self.limit:
            self.bad, self.parts = f"the value there is more than {self.limit} bytes", []
            return
        self.parts.append(piece)


def call(
    engine: Engine,
    fn: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    pickle: bool = False,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    on_output: OutputCallback | None = None,
    step: str | None = None,
) -> Any:
    """``fn(*args, **kwargs)`` there, its value here: see the module doc."""
    bundle = bundle_of(fn)
    name = step or f"call {bundle.qualname}"
    request = _request(bundle, args, kwargs, pickle, name)
    got = _Value(MAX_VALUE)
    req = StepRequest.script(
        PackageScript(source("call.py"), name=ENTRY, package=bundle.package.hash, files=request),
        display=engine.python_display("call.py", [f"{bundle.module}:{bundle.qualname}"]),
        step=name,
        timeout=timeout,
        env=env,
        cwd=cwd,
        check=False,
        on_output=on_output,
        shipped=bundle.package,
        value=MAX_VALUE,
        on_value=got.take,
    )
    req = replace(req, header=replace(req.header, worker=True))  # a warm worker may run it
    result = run_step(engine, req)
    if got.bad:
        raise RemoteError(f"call {bundle.qualname}: {got.bad}", result=result)
    if not got.parts:
        if result.exit_code:
            raise StepFailed(result)
        raise RemoteError(f"call {bundle.qualname} ended without a value", result=result)
    return _decode(b"".join(got.parts), pickle, bundle.qualname, result)


def _request(
    bundle: Bundle, args: Sequence[Any], kwargs: Mapping[str, Any], use_pickle: bool, step: str
) -> dict[str, bytes]:
    """``call.json`` (ORDER), the far side's order; arguments that cannot go refused here."""
    order: dict[str, Any] = {
        "module": bundle.module,
        "qualname": bundle.qualname,
        "pickle": use_pickle,
    }
    if use_pickle:
        import pickle

        try:
            data = pickle.dumps((tuple(args), dict(kwargs)))
        except Exception as exc:
            raise TypeError(f"{step}: the arguments cannot be pickled: {exc}") from None
        order["args"], order["kwargs"] = base64.b64encode(data).decode("ascii"), None
    else:
        for i, arg in enumerate(args):
            check_json(arg, f"{step}: argument {i + 1}")
        for key, arg in kwargs.items():
            check_json(arg, f"{step}: argument {key}=")
        order["args"], order["kwargs"] = list(args), dict(kwargs)
    return {ORDER: json.dumps(order).encode()}


def _decode(raw: bytes, use_pickle: bool, qualname: str, result: Any) -> Any:
    """The value (or the far side's exception, raised) from what came: read with bounds,
    and a pickle loaded only where the caller asked for pickle."""

    def wrong(why: str) -> RemoteError:
        return RemoteError(f"call {qualname}: {why}", result=result)

    try:
        envelope = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise wrong("the value there is nested too deep to read") from None
    except (UnicodeDecodeError, ValueError):
        raise wrong("what came back is not the call's record (not JSON)") from None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("ok"), bool):
        raise wrong("what came back is not the call's record")
    if not envelope["ok"]:
        rtype = _text(envelope.get("type"), MAX_TYPE)
        message = _text(envelope.get("message"), MAX_MESSAGE)
        tb = _text(envelope.get("traceback"), MAX_TRACEBACK)
        raise RemoteError(
            f"call {qualname} raised {rtype}: {message}",
            result=result,
            remote_type=rtype,
            remote_message=message,
            remote_traceback=tb,
        )
    if "pickle" in envelope:
        if not use_pickle:
            raise wrong("the far side sent a pickle, which a call without pickle=True never loads")
        import pickle

        try:
            return pickle.loads(base64.b64decode(str(envelope["pickle"]), validate=True))
        except Exception as exc:
            raise wrong(f"the pickle that came cannot be loaded here: {exc}") from None
    if "json" not in envelope:
        raise wrong("the call's record holds no value")
    return envelope["json"]


def _text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else ""
    return text if len(text) <= limit else text[: limit - 3] + "..."
