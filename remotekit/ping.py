"""Ping: check a target's layers in order (connection, each hop of its chain, interpreter,
torch) and stop at the first that fails; that check says which layer is broken and why.

:meth:`remotekit.target.Target.ping` is the public way in; :func:`ping` does the work.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from remotekit.engine import Engine
from remotekit.errors import RemotekitError, StepCancelled
from remotekit.layers import Hop
from remotekit.result import Script, Shown
from remotekit.step import StepRequest, run_step

__all__ = ["Check", "PingReport", "ping"]


@dataclass(frozen=True, repr=False)
class Check(Shown):
    """One layer's answer in :meth:`Target.ping` (also handed to its ``on_check`` as it is
    made); its ``str()`` is the line ``remotekit ping`` prints for it."""

    layer: str
    ok: bool
    detail: str

    repr_keys = ("layer", "ok")

    def render(self) -> str:
        """``ok  LAYER: DETAIL``, ``FAIL ...``, or ``warn torch: ...`` (a missing torch stops
        nothing but the checkpoint diagnostics)."""
        mark = "ok  " if self.ok else "warn" if self.layer == "torch" else "FAIL"
        return f"{mark} {self.layer}: {self.detail}"


@dataclass(frozen=True, repr=False)
class PingReport(Shown):
    """Layer checks in order; the first failed one says which layer is broken."""

    host: str
    checks: tuple[Check, ...]

    @property
    def failed(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)

    @property
    def findings(self) -> tuple[str, ...]:
        return tuple(f"{c.layer}: {c.detail}" for c in self.checks if not c.ok)

    @property
    def exit_code(self) -> int:
        """0 all layers up; 1 only torch is missing; 2 a layer failed."""
        bad = self.failed
        if bad is None:
            return 0
        return 1 if bad.layer == "torch" else 2

    def render(self) -> str:
        """One line a layer, as ``remotekit ping`` prints them."""
        return "\n".join(c.render() for c in self.checks)


def ping(engine: Engine, on_check: Callable[[Check], None] | None = None) -> PingReport:
    """Check each layer of a target (its ``engine``) in turn; stops at the first that fails.

    ``on_check`` sees each check as it is made. A cancel (:class:`StepCancelled`) is raised;
    every other failure is a failed check in the report.
    """
    checks: list[Check] = []

    def add(layer: str, ok: bool, detail: str) -> bool:
        check = Check(layer, ok, detail)
        checks.append(check)
        if on_check is not None:
            on_check(check)
        return ok

    try:
        if _transport(engine, add) and _hops(engine, add):
            _interpreter(engine, add)
    finally:
        report = PingReport(engine.name, tuple(checks))
    return report


_Add = Callable[[str, bool, str], bool]


def _transport(engine: Engine, add: _Add) -> bool:
    transport = engine.transport
    try:
        transport.connect()
    except RemotekitError as exc:
        return add(transport.label, False, _unprefixed(transport.label, exc.message))
    return add(transport.label, True, transport.reached)


def _unprefixed(label: str, message: str) -> str:
    """``message`` without the address it starts with when ``label`` (``ssh user@host:port``)
    already names it: the check reads ``ssh root@h:22: connection refused``, not the address
    twice."""
    who = label.split(" ", 1)[-1] + ": "
    return message[len(who) :] if message.startswith(who) else message


def _hops(engine: Engine, add: _Add) -> bool:
    try:
        engine.launch_for("ping")  # looks up a hop given by name (once)
    except RemotekitError as exc:
        return add(_looked_up(engine, exc).label, False, exc.message)
    for i, hop in enumerate(engine.spec.hops):  # in order: each probe runs inside the ones before
        try:
            code, text = engine.probe(engine.inside(i, hop.probe()))
        except StepCancelled:
            raise
        except RemotekitError as exc:  # e.g. ConnectionLost: the connection went during the check
            return add(hop.label, False, exc.message)
        up, shown = hop.verdict(code, text)
        if not up and hop.tool_missing(code, text):  # our words, not the shell's
            shown = hop.not_found(*engine.hop_place(i))
        if not add(hop.label, up, shown):
            return False
    return True


def _looked_up(engine: Engine, exc: RemotekitError) -> Hop:
    """The hop whose lookup failed: the one the error names, else the first that looks up."""
    lookups = [h for h in engine.spec.hops if h.lookup() is not None] or list(engine.spec.hops)
    named = getattr(exc, "container", None)
    return next((h for h in lookups if h.name == named), lookups[0])


def _interpreter(engine: Engine, add: _Add) -> bool:
    interpreter = engine.launch.interpreter or "python"
    script = Script(_PING_PY, name="remotekit_ping.py")
    timeout = max(30.0, engine.spec.timeouts.connect)
    display = engine.python_display(script.name)
    request = StepRequest.script(script, display=display, step="ping", timeout=timeout)
    try:
        res = run_step(engine, request)
    except StepCancelled:
        raise
    except RemotekitError as exc:
        return add(interpreter, False, exc.message)
    lines = res.stdout.strip().splitlines()
    info = _json_object(lines[-1]) if lines else None
    if info is None:  # a wrapper or a login banner there spoke after (or instead of) the script
        got = f"its last line is {lines[-1][:200]!r}" if lines else "no output"
        return add(interpreter, False, f"the ping script's answer is not JSON: {got}")
    # sys.executable is empty when the interpreter was found without PATH (slurm)
    add(info.get("executable") or interpreter, True, f"Python {info['python']}")
    add("agent", True, engine.agent_status())  # the step above ran on it, when it is on
    torch = info.get("torch")
    return add("torch", torch is not None, torch or TORCH_MISSING % info.get("torch_error", ""))


#: A missing torch is a warning, not a broken hop: only the checkpoint diagnostics need it.
TORCH_MISSING = (
    "not importable: %s; torch is needed only for the checkpoint diagnostics (ckpt-*, "
    "diagnose, demo): run, py, put, get, shell and sync work without it"
)


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        info = json.loads(line)
    except ValueError:
        return None
    return info if isinstance(info, dict) and "python" in info else None


_PING_PY = b"""\
import json, platform, sys
info = {"python": platform.python_version(), "executable": sys.executable}
try:
    import torch
    info["torch"] = torch.__version__ + (" (CUDA %s)" % torch.version.cuda if torch.version.cuda else " (CPU)")
except Exception as e:
    info["torch_error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(info))
"""
