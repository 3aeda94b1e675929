"""What a diagnostic takes from its host's hosts.yaml entry when the caller leaves it out,
decided here, once, for both faces: the ``remotekit`` tasks pass on what was typed (None
when nothing was) and the API functions resolve it with the functions below; neither
reads ``target.spec`` for a default on its own.

- checkpoints (``ckpt-scan``, ``ckpt-bisect``, ``train-log``'s saves, ``disk``,
  ``diagnose``): the path given, else the host's ``checkpoints:``
  (:func:`checkpoints`); a run's (``diagnose --run DIR``): DIR, then the host's
  ``checkpoints:`` (:func:`run_checkpoints`: the first that holds any);
- the folders ``disk`` measures: the host's ``workdir`` (else ``~``) and its checkpoints
  (:func:`disk_paths`);
- the GPUs ``gpu`` expects: hosts.yaml's ``gpus: N`` / ``gpu: true`` (:func:`gpus`).

An empty string is "not given" as None is: the command line's unset option is ``""``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from remotekit.errors import RemotekitError

if TYPE_CHECKING:
    from remotekit.target import Target

__all__ = [
    "NO_CHECKPOINTS",
    "checkpoints",
    "disk_paths",
    "gpus",
    "need_checkpoints",
    "run_checkpoints",
]

#: What a checkpoint diagnostic given no path says on a host without ``checkpoints:``.
NO_CHECKPOINTS = "no path given (--path) and no `checkpoints:` for this host in hosts.yaml"


def checkpoints(target: Target, path: str | None = None) -> str | None:
    """Where a checkpoint diagnostic looks: ``path``, else the host's ``checkpoints:``, else
    None."""
    return path or target.spec.checkpoints or None


def need_checkpoints(target: Target, path: str | None, step: str) -> str:
    """:func:`checkpoints`, or a :class:`~remotekit.RemotekitError` naming host and ``step``
    when there are none to look at (no path, no ``checkpoints:``)."""
    where = checkpoints(target, path)
    if where is None:
        raise RemotekitError(NO_CHECKPOINTS, host=target.name, step=step)
    return where


def run_checkpoints(target: Target, path: str | None, run: str | None) -> tuple[str, ...]:
    """The checkpoint folders to try, in order, for ``diagnose``: ``path`` alone when
    given; with a ``run``, the run's folder, then the host's ``checkpoints:`` (a run that
    keeps its checkpoints elsewhere, where hosts.yaml says); else the host's
    ``checkpoints:``; () when there is nowhere to look."""
    if path:
        return (path,)
    places = [run, target.spec.checkpoints] if run else [target.spec.checkpoints]
    return tuple(dict.fromkeys(p for p in places if p))


def disk_paths(target: Target, ckpt: str | None = None) -> list[str]:
    """What ``disk`` measures when given no path: the host's ``workdir`` (else ``~``) and
    ``ckpt`` (default: the host's ``checkpoints:``)."""
    where = ckpt or checkpoints(target)
    return [target.spec.workdir or "~", *([where] if where else [])]


def gpus(
    target: Target, expected: bool | None = None, declared: int | None = None
) -> tuple[bool, int | None]:
    """What ``gpu`` expects of a host: a GPU at all, and how many (None: any number);
    ``expected`` / ``declared`` where given, else hosts.yaml's ``gpus: N`` / ``gpu: true``."""
    return (
        target.spec.has_gpu if expected is None else expected,
        target.spec.gpus if declared is None else declared,
    )
