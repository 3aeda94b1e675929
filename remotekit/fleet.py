"""Many targets at once: any step or diagnostic, in parallel with a bound, results in order.

    import remotekit
    from remotekit.diagnostics import system

    inv = remotekit.load_inventory()
    with remotekit.fleet(inv.select(group="gpu")) as f:
        for o in f.map(system.gpu_status):      # one HostOutcome per host, inventory order
            print(o.host, o.exit_code, o.error or o.value.findings)

One slow, unreachable or failing host never blocks or hides the others: its outcome carries
the error. Ctrl-C (KeyboardInterrupt in the calling thread) cancels every running step, each
stopped there as on a timeout, and raises :class:`FleetInterrupted` holding what finished.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable

from remotekit.errors import exit_message
from remotekit.result import Result, Shown
from remotekit.spec import HostSpec
from remotekit.target import Target

__all__ = ["DEFAULT_PARALLEL", "Fleet", "FleetInterrupted", "HostOutcome", "fleet"]

#: Hosts worked on at once by default. Steps mostly wait on the network, so threads are cheap.
DEFAULT_PARALLEL = 64


@dataclass(frozen=True, repr=False)
class HostOutcome(Shown):
    """What one host of a fleet produced: ``value`` (a Result or a report) or ``error``."""

    host: str
    value: Any = None
    error: BaseException | None = None
    duration_s: float = 0.0
    chain: str = ""

    @property
    def exit_code(self) -> int:
        """0 OK, 1 findings, 2 failed (as every remotekit task exits)."""
        if self.error is not None:
            return 2
        if isinstance(self.value, Result):
            return 0 if self.value.ok else 2
        code = getattr(self.value, "exit_code", 0)
        return code if isinstance(code, int) else 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def status(self) -> str:
        return {0: "ok", 1: "findings"}.get(self.exit_code, "failed")

    @property
    def reason(self) -> str:
        """Why this host is not OK, in one place whichever layer said it: the error (the
        transport, a hop, the step), a failed Result's exit and last output, or a report's
        errors and findings. ``""`` when OK."""
        if self.error is not None:
            return str(self.error)
        value = self.value
        if isinstance(value, Result):
            return "" if value.ok else exit_message(value)
        if not self.exit_code:
            return ""
        said = (*(getattr(value, "errors", None) or ()), *(getattr(value, "findings", None) or ()))
        return "; ".join(str(s) for s in said) or f"exit {self.exit_code}"

    def render(self) -> str:
        """``host: status``, then the reason (not OK) or what the value renders."""
        head = f"{self.host}: {self.status}"
        if self.error is not None or (isinstance(self.value, Result) and not self.value.ok):
            return f"{head}: {self.reason}"
        body = self.value.render() if callable(getattr(self.value, "render", None)) else ""
        return f"{head}\n{body}" if body else head


class FleetInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the fleet.

    ``outcomes`` holds, in target order, every host that started: the finished ones as they
    finished, the stopped ones with :class:`~remotekit.errors.StepCancelled` (or whatever
    their ``fn`` made of it). Hosts still queued (more than ``parallel``) never started and
    are absent.
    """

    def __init__(self, outcomes: list[HostOutcome]):
        self.outcomes = outcomes
        super().__init__("fleet interrupted")


class Fleet:
    """Targets worked on in parallel, ``parallel`` at a time."""

    def __init__(self, targets: Sequence[Target], parallel: int | None = None):
        self.targets = list(targets)
        self.parallel = max(1, parallel or DEFAULT_PARALLEL)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every target's connection (the ``with`` block does this on the way out), all
        at once: each close waits for its agent to stop its steps and leave (a round trip, or
        a step's grace), which one host after another would pay once per host. Every target
        is closed; the first error, if any, is raised after."""
        if len(self.targets) < 2:
            for t in self.targets:
                t.close()
            return
        with ThreadPoolExecutor(
            max_workers=min(self.parallel, len(self.targets)),
            thread_name_prefix="remotekit-close",
        ) as pool:
            closing = [pool.submit(t.close) for t in self.targets]
        for fut in closing:
            fut.result()

    def map(
        self,
        fn: Callable[[Target], Any],
        *,
        on_done: Callable[[HostOutcome], None] | None = None,
    ) -> list[HostOutcome]:
        """``fn(target)`` on every target; outcomes in target order.

        ``on_done`` is called in the calling thread as each host finishes. A RemotekitError
        (or any other exception) from ``fn`` becomes that host's ``error``.
        """
        for t in self.targets:
            t.resume()  # a target cancelled by an earlier interrupted map runs again
        pool = ThreadPoolExecutor(
            max_workers=min(self.parallel, max(1, len(self.targets))),
            thread_name_prefix="remotekit-fleet",
        )
        try:
            return _MapRun(self.targets, fn, pool, on_done).wait()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def run(self, argv: Sequence[str], **kwargs: Any) -> list[HostOutcome]:
        """:meth:`Target.run` on every host."""
        on_done = kwargs.pop("on_done", None)
        return self.map(lambda t: t.run(argv, **kwargs), on_done=on_done)

    def run_python(self, script: Any, args: Sequence[str] = (), **kwargs: Any) -> list[HostOutcome]:
        """:meth:`Target.run_python` on every host."""
        on_done = kwargs.pop("on_done", None)
        return self.map(lambda t: t.run_python(script, args, **kwargs), on_done=on_done)

    def call(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> list[HostOutcome]:
        """:meth:`Target.call` on every host: each outcome's ``value`` is that host's
        value, its ``error`` what went wrong there (a ``RemoteError`` for an exception)."""
        on_done = kwargs.pop("on_done", None)
        return self.map(lambda t: t.call(fn, *args, **kwargs), on_done=on_done)


def fleet(targets: Iterable[Target | HostSpec], parallel: int | None = None) -> Fleet:
    """A :class:`Fleet` of ``targets`` (Targets, or HostSpecs from ``Inventory.select``)."""
    return Fleet([t if isinstance(t, Target) else Target(t) for t in targets], parallel)


def _outcome_of(fn: Callable[[Target], Any], target: Target) -> HostOutcome:
    """``fn(target)`` as a HostOutcome: a host's failure is data, not the fleet's failure."""
    t0 = time.monotonic()
    try:
        value = fn(target)
    except Exception as exc:
        return HostOutcome(
            target.name, error=exc, duration_s=time.monotonic() - t0, chain=target.chain
        )
    return HostOutcome(
        target.name, value=value, duration_s=time.monotonic() - t0, chain=target.chain
    )


class _MapRun:
    """One :meth:`Fleet.map`: every target submitted to ``pool``, outcomes in target order."""

    def __init__(
        self,
        targets: list[Target],
        fn: Callable[[Target], Any],
        pool: ThreadPoolExecutor,
        on_done: Callable[[HostOutcome], None] | None,
    ):
        self.targets = targets
        self.on_done = on_done
        self.outcomes: dict[int, HostOutcome] = {}
        self.futures: dict[Future[HostOutcome], int] = {
            pool.submit(_outcome_of, fn, t): i for i, t in enumerate(targets)
        }

    def wait(self) -> list[HostOutcome]:
        pending = set(self.futures)
        try:
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                self.collect(done)
        except KeyboardInterrupt:
            self.stop()
            # Not ``pending``: the interrupt may have come between ``wait`` and ``collect``.
            rest = [f for f, i in self.futures.items() if i not in self.outcomes]
            wait(rest)
            self.collect(rest)
            raise FleetInterrupted([self.outcomes[i] for i in sorted(self.outcomes)]) from None
        except BaseException:
            self.stop()  # our own failure (e.g. in ``on_done``): leave nothing running there
            raise
        return [self.outcomes[i] for i in range(len(self.targets))]

    def collect(self, done: Iterable[Future[HostOutcome]]) -> None:
        for fut in sorted(done, key=self.futures.__getitem__):
            if fut.cancelled():
                continue  # queued when the fleet was stopped: it never started
            self.outcomes[self.futures[fut]] = fut.result()
            if self.on_done is not None:
                self.on_done(self.outcomes[self.futures[fut]])

    def stop(self) -> None:
        # Queued hosts never start (their ``fn`` would still connect, probe ...); every
        # running step is stopped there, and each running ``fn`` ends with its error.
        for fut in self.futures:
            fut.cancel()  # a no-op for the running and the finished ones
        for t in self.targets:
            t.cancel()
