"""Kubernetes: ``kubectl [--context C] exec -i -n NS POD [-c CTR] -- argv``.

hosts.yaml: ``kubectl: {pod: P, container: C, namespace: NS, context: CTX, bin: PATH}``
(only ``pod`` is required; namespace defaults to ``default``). kubectl's words, exit 1::

    Error from server (NotFound): pods "P" not found
    Error from server (BadRequest): container C is not valid for pod P
    Error from server (BadRequest): pod P does not have a host assigned              (pending)
    error: unable to upgrade connection: container not found ("C")           (not running)
    error: cannot exec into a container in a completed pod; current phase is Succeeded
    error: context "X" does not exist

A command that fails inside returns its code with ``command terminated with exit code N``
(126: cannot be invoked, 127: not found).
Interactive (``remotekit shell``): ``exec -it``; kubectl only allocates the TTY when its own
stdin is one (else it warns ``Unable to use a TTY - input is not a terminal ...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from remotekit.errors import ContainerError, ContainerNotFound, ContainerNotRunning
from remotekit.layers.core import Failure, Fields, Hop, Launch

__all__ = ["Kubectl"]

#: A DNS-1123 name: pods, containers and namespaces.
_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def is_k8s_name(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= 253 and bool(_K8S_NAME.fullmatch(v))


def is_context(v: Any) -> bool:
    # free-form in kubeconfig (``arn:aws:eks:...:cluster/x``, ``user@cluster``), but one
    # argument that kubectl cannot read as a flag
    return isinstance(v, str) and bool(re.fullmatch(r"[^\s-][^\s]*", v))


@dataclass(frozen=True)
class Kubectl(Hop):
    """Enter container ``container`` of pod ``pod`` with ``kubectl exec -i``."""

    pod: str
    container: str | None = None
    namespace: str = "default"
    context: str | None = None
    bin: str = "kubectl"

    key: ClassVar[str] = "kubectl"
    kind: ClassVar[str] = "pod"
    up: ClassVar[str] = "Running"
    says: ClassVar[str] = "kubectl says:\n{words}"
    failures: ClassVar[tuple[Failure, ...]] = (
        Failure(r"\(notfound\)|is not valid for pod", ContainerNotFound, "no {hop.what}; {said}"),
        Failure(
            "container not found|cannot exec into a container in a completed pod"
            "|does not have a host assigned",
            ContainerNotRunning,
            "{hop.what} is not running; {said}",
        ),
        Failure(
            "^(error: |error from server)",
            ContainerError,
            "kubectl cannot enter {hop.what}; {said}",
            code=1,
        ),
    )

    @classmethod
    def read(cls, fields: Fields) -> Kubectl:
        fields.get("kubectl", lambda v: isinstance(v, dict), "a mapping {pod: P, ...}")
        sub = fields.mapping("kubectl", ("pod", "container", "namespace", "context", "bin"))
        name = "a Kubernetes name (lower-case letters, digits, '-', '.')"
        pod = sub.get("pod", is_k8s_name, name)
        if pod is None:
            sub.fail("pod", "`kubectl:` needs `pod:`")
        return cls(
            pod,
            sub.get("container", is_k8s_name, name),
            sub.get("namespace", is_k8s_name, name) or "default",
            sub.get("context", is_context, "a kubeconfig context name (no spaces, no leading '-')"),
            sub.text("bin") or "kubectl",
        )

    @property
    def name(self) -> str:
        return self.pod

    @property
    def what(self) -> str:
        ctr = f" container {self.container!r}" if self.container else ""
        return f"pod {self.namespace}/{self.pod}{ctr}"

    @property
    def label(self) -> str:
        ctr = f" -c {self.container}" if self.container else ""
        return f"kubectl exec -n {self.namespace} {self.pod}{ctr}"

    def _kubectl(self) -> tuple[str, ...]:
        return (self.bin, *(("--context", self.context) if self.context else ()))

    def apply(self, launch: Launch) -> Launch:
        return self._exec(launch, "-i")

    def interactive(self, launch: Launch) -> Launch:
        return self._exec(launch, "-it")  # -t: a pty in the container, resized with ours

    def _exec(self, launch: Launch, flags: str) -> Launch:
        ctr = ("-c", self.container) if self.container else ()
        return self.wrap(
            launch, (*self._kubectl(), "exec", flags, "-n", self.namespace, self.pod, *ctr, "--")
        )

    def probe(self) -> tuple[str, ...]:
        return (
            *self._kubectl(),
            "get",
            "pod",
            "-n",
            self.namespace,
            self.pod,
            "-o",
            "jsonpath={.status.phase}",
        )

    def exec_failed(self, code: int | None, text: str) -> bool:
        return code in (126, 127) and "command terminated with exit code" in text
