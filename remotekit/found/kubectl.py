"""``kubectl_selector: SELECTOR``: the running pods a label selector matches, each entered by
``kubectl exec``.

hosts.yaml (``namespace`` default ``default``; ``container``, ``context``, ``bin`` as the
``kubectl`` hop takes them; ``via``: the declared host where kubectl runs, default ``local``)::

    groups:
      trainers: {kubectl_selector: app=trainer, namespace: ml, container: main, python: python3}

On the via host: ``kubectl [--context C] get pods -n NS -l SELECTOR -o json`` prints a
``List`` whose ``items`` are the pods (an empty list when none matches; ``-o json`` prints
no "No resources found" line). A pod is a member when its ``status.phase`` is ``Running``
and it is not being deleted (``metadata.deletionTimestamp``); it is named by its pod name:
``trainers/trainer-0``. kubectl's refusals (exit 1) are quoted, e.g. ``error: context "x"
does not exist`` or the API server's ``Error from server (BadRequest): ... unable to parse
requirement: ...`` for a selector it cannot read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from remotekit.found.core import Ask, Finder, Found, QueryFailed, refused
from remotekit.layers.core import Fields, is_text
from remotekit.layers.kubectl import Kubectl, is_context, is_k8s_name

__all__ = ["KubeSelector"]

#: A label selector: label keys and values, ``= == != ! in notin ( ) ,`` and spaces
#: (Kubernetes "Labels and Selectors"); one argument that kubectl cannot read as a flag.
SELECTOR = re.compile(r"[A-Za-z0-9_./][A-Za-z0-9_./=!,() -]{0,1023}")


def _is_selector(v: Any) -> bool:
    return isinstance(v, str) and bool(SELECTOR.fullmatch(v))


@dataclass(frozen=True)
class KubeSelector(Finder):
    """The running pods of label selector ``selector`` in ``namespace`` (kubectl get pods)."""

    selector: str
    namespace: str = "default"
    container: str | None = None
    context: str | None = None
    bin: str = "kubectl"
    via: str = "local"

    key: ClassVar[str] = "kubectl_selector"
    options: ClassVar[tuple[str, ...]] = ("namespace", "container", "context", "bin", "via")
    nobody: ClassVar[str] = "no running pod matches"

    @classmethod
    def read(cls, fields: Fields) -> KubeSelector:
        selector = fields.get(
            "kubectl_selector",
            _is_selector,
            "a label selector (e.g. app=trainer; letters, digits, '._/-', "
            "'= == != ! in notin ( ) ,' and spaces)",
        )
        name = "a Kubernetes name (lower-case letters, digits, '-', '.')"
        return cls(
            selector,
            fields.get("namespace", is_k8s_name, name) or "default",
            fields.get("container", is_k8s_name, name),
            fields.get("context", is_context, "a kubeconfig context name"),
            fields.text("bin") or "kubectl",
            fields.get("via", is_text, "a declared host (where kubectl runs)") or "local",
        )

    @property
    def query(self) -> str:
        return f"kubectl get pods -n {self.namespace} -l {self.selector} on {self.via}"

    def find(self, ask: Ask) -> list[Found]:
        context = ("--context", self.context) if self.context else ()
        argv = (self.bin, *context, "get", "pods", "-n", self.namespace, "-l", self.selector)
        said = ask((*argv, "-o", "json"))
        if said.code != 0:
            raise refused("kubectl get pods", said)
        return [
            Found(pod, Kubectl(pod, self.container, self.namespace, self.context, self.bin))
            for pod in running_pods(said.out)
        ]


def running_pods(out: str) -> list[str]:
    """The names of the Running pods, not being deleted, of ``kubectl get pods -o json``."""
    try:
        doc = json.loads(out)
    except ValueError:
        raise QueryFailed(f"kubectl printed no JSON:\n  {out.strip()[:200]}") from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise QueryFailed("kubectl printed JSON that is not a list of pods (no `items`)")
    names = []
    for pod in items:
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        status = pod.get("status") if isinstance(pod, dict) else None
        if not isinstance(meta, dict) or not isinstance(status, dict):
            raise QueryFailed("kubectl printed a pod without metadata or status")
        name = meta.get("name")
        if not isinstance(name, str):
            raise QueryFailed("kubectl printed a pod without a name")
        if status.get("phase") == "Running" and not meta.get("deletionTimestamp"):
            names.append(name)
    return names
