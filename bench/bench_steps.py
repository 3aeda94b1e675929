"""Steps benchmark: a warm step on remotekit's agent vs the peers that keep an interpreter there.

Two chains, each to one real LXC container and its venv Python (tests/runtimes.py), through a
real sshd on 127.0.0.1:

  pct   local -> sshd -> the ``pct exec`` stand-in -> lxc-attach -> venv Python
  lxc   local -> sshd -> lxc-attach -> venv Python

and on each, warm (the connection and the far side's interpreter already up), p50 of N, the
tools taking turns run after run (bench_engine.interleaved_medians):

  true     remotekit ``t.run(["true"])`` on the agent  vs  Mitogen ``ctx.call(run_true)``  vs
           execnet ``remote_exec`` of the same: ``true`` started there as a new process,
           its exit status back here
  tiny     remotekit ``t.run_python(Script('print("ok")'))`` (a file shipped and run as
           ``__main__`` in a process of its own, its output back)  vs  the peers running the
           same source in the interpreter they keep (``run_source``), its printed text back
  target   remotekit / the best peer <= 1.5x, for both (issue 34)

``--before TREE``: one more column, "before": remotekit's steps through an agent whose far
side (``remote/boot.py``, ``agent.py``, ``runner.py``) is TREE's (another checkout, e.g.
``git worktree add --detach /tmp/base main``), this checkout's caller, as bench_call.py's;
the tools then take turns in a rotating order (each follows every other as often). Run it
both ways (this checkout first against TREE, then TREE's bench first against this one).

The peers are not dependencies of remotekit; install them in the bench's environment only:
``.venv/bin/pip install mitogen==0.3.54 execnet==2.1.2``. A peer that is absent gets no
column, and a line that says so. The load average is printed with the figures (the machine
is shared): read the ratios.

Run: .venv/bin/python bench/bench_steps.py [--runs 200] [--only pct,lxc] [--before TREE]
(as root, with LXC: see .ci/run; writes bench/results/steps.json)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import remotekit  # noqa: E402
from bench.bench_call import far_side_of  # noqa: E402
from bench.bench_engine import interleaved_medians, print_checks  # noqa: E402
from tests import runtimes  # noqa: E402
from tests.harness import FakeNode, SSHServer, venv_prefix  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import peer_target  # noqa: E402  (the peers' far-side functions: Mitogen ships the module)

TARGET = 1.5
INSTALL = ".venv/bin/pip install mitogen==0.3.54 execnet==2.1.2"


def _tool(name: str) -> str:
    return shutil.which(name, path=f"{os.environ['PATH']}:/usr/sbin:/sbin") or name


def ssh_config(server: SSHServer, path: Path) -> Path:
    """An OpenSSH client config for ``server`` (the peers start OpenSSH's ssh)."""
    path.write_text(
        f"Host 127.0.0.1\n  Port {server.port}\n  User {server.user}\n"
        f"  IdentityFile {server.client_key}\n  IdentitiesOnly yes\n  BatchMode yes\n"
        f"  UserKnownHostsFile {server.known_hosts}\n  StrictHostKeyChecking yes\n"
    )
    return path


def mitogen_peer(
    server: SSHServer, hop: list[str], py: str, stack: ExitStack
) -> dict[str, Callable[[], object]] | str:
    """Mitogen's two figures' functions on the chain ``ssh -> hop -> py``, or why not."""
    try:
        import mitogen.master
    except ImportError:
        return f"mitogen is not installed ({INSTALL})"
    broker = mitogen.master.Broker()
    stack.callback(broker.shutdown)
    router = mitogen.master.Router(broker)
    via = router.ssh(
        hostname="127.0.0.1",
        port=server.port,
        username=server.user,
        identity_file=str(server.client_key),
        identities_only=True,
        check_host_keys="enforce",
        ssh_args=["-o", f"UserKnownHostsFile={server.known_hosts}"],
        python_path=py,
    )
    ctx = router.local(python_path=[*hop, py], via=via)
    return {
        "true": lambda: ctx.call(peer_target.run_true),
        "tiny": lambda: ctx.call(peer_target.run_source, peer_target.TINY),
    }


def execnet_peer(
    config: Path, hop: list[str], py: str, stack: ExitStack
) -> dict[str, Callable[[], object]] | str:
    """execnet's two figures' functions on the chain ``ssh -> hop -> py``, or why not."""
    try:
        import execnet
    except ImportError:
        return f"execnet is not installed ({INSTALL})"
    python = " ".join([*hop, py])
    gw = execnet.makegateway(f"ssh=127.0.0.1//ssh_config={config}//python={python}")
    stack.callback(gw.exit)
    with open(peer_target.__file__) as f:
        module = f.read()

    def call(expr: str) -> object:
        ch = gw.remote_exec(f"{module}\nchannel.send({expr})")
        return ch.receive()

    return {
        "true": lambda: call("run_true()"),
        "tiny": lambda: call(f"run_source({peer_target.TINY!r})"),
    }


def with_far_side(tree: Path, open_target: Callable[[], remotekit.Target]) -> remotekit.Target:
    """A target opened by ``open_target`` whose agent runs ``tree``'s far side (the loader is
    swapped while its agent starts: its first step)."""
    import remotekit.agent as agent_module

    ours = agent_module.loader_bytes
    agent_module.loader_bytes = far_side_of(tree)  # type: ignore[assignment]
    try:
        t = open_target()
        t.run(["true"])
    finally:
        agent_module.loader_bytes = ours  # type: ignore[assignment]
    return t


def measure(
    kind: str,
    t: remotekit.Target,
    peers: dict[str, dict[str, Callable[[], object]]],
    runs: int,
    before: remotekit.Target | None = None,
) -> dict[str, Any]:
    tiny = remotekit.Script(peer_target.TINY, name="tiny.py")
    row: dict[str, Any] = {"chain": kind, "load": os.getloadavg()[0]}
    for what in ("true", "tiny"):
        fns: dict[str, Callable[[], object]] = {}
        for name, tg in (("remotekit", t), ("before", before)):
            if tg is not None:
                fns[name] = (
                    (lambda tg=tg: tg.run(["true"]))
                    if what == "true"
                    else (lambda tg=tg: tg.run_python(tiny))
                )
        fns.update({p: fns_[what] for p, fns_ in peers.items()})
        medians = interleaved_medians(fns, runs, rotate=True)
        best = min(
            (v for k, v in medians.items() if k not in ("remotekit", "before")), default=None
        )
        row[what] = {k: v * 1000 for k, v in medians.items()}
        row[what]["ratio"] = medians["remotekit"] / best if best else None
        if before is not None:
            row[what]["before_ratio"] = medians["before"] / best if best else None
            row[what]["after_before"] = medians["remotekit"] / medians["before"]
    row["load_after"] = os.getloadavg()[0]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--only", default="pct,lxc")
    ap.add_argument("--before", default=None, help="a tree whose far side is the 'before' column")
    args = ap.parse_args()
    kinds = [k for k in args.only.split(",") if k]
    why = runtimes.missing("lxc")
    if why is not None:
        print(f"skip: {why}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="rk-bench-steps-"))
    py = f"{venv_prefix()}/bin/python"
    rows = []
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, True)
        ct = runtimes.LxcContainer()
        stack.callback(ct.stop)
        ct.start()
        node = FakeNode(work / "node", running=ct).install()
        node.add(200)
        server = SSHServer(work / "sshd", env=node.env)
        stack.callback(server.stop)
        server.start()
        config = ssh_config(server, work / "ssh_config")
        attach = _tool("lxc-attach")
        hops = {
            "pct": [str(node.pct), "exec", "200", "--"],
            "lxc": [attach, "-n", ct.name, "--clear-env", "--"],
        }
        hosts = {
            "pct": server.host_yaml(container=200, pct=str(node.pct), venv=venv_prefix()),
            "lxc": server.host_yaml(lxc={"name": ct.name, "bin": attach}, venv=venv_prefix()),
        }
        (work / "hosts.yaml").write_text(json.dumps({"hosts": hosts}))
        inv = remotekit.load_inventory(work / "hosts.yaml")
        for kind in kinds:
            peers: dict[str, dict[str, Callable[[], object]]] = {}
            for name, got in (
                ("mitogen", mitogen_peer(server, hops[kind], py, stack)),
                ("execnet", execnet_peer(config, hops[kind], py, stack)),
            ):
                if isinstance(got, str):
                    print(f"skip the {name} column: {got}")
                else:
                    peers[name] = got
            t = stack.enter_context(inv.target(kind, agent=True))
            before = None
            if args.before:  # its agent started now, with the other tree's far side
                before = with_far_side(
                    Path(args.before),
                    lambda kind=kind: stack.enter_context(inv.target(kind, agent=True)),
                )
            rows.append(measure(kind, t, peers, args.runs, before))
    report(rows)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "steps.json").write_text(
        json.dumps({"runs": args.runs, "before": args.before, "rows": rows}, indent=2)
    )
    return (
        0
        if all(
            r[w]["ratio"] is None or r[w]["ratio"] <= TARGET for r in rows for w in ("true", "tiny")
        )
        else 1
    )


def report(rows: list[dict[str, Any]]) -> None:
    figures: dict[str, float] = {}
    checks = []
    for r in rows:
        k = r["chain"]
        figures[f"{k}_load_avg_1min"] = r["load"]
        for what in ("true", "tiny"):
            for tool, ms in r[what].items():
                if tool in ("before_ratio", "after_before"):
                    if ms is not None:
                        figures[f"{k}_{what}_{tool}"] = ms
                elif tool != "ratio":
                    figures[f"{k}_{what}_{tool}_ms"] = ms
            ratio = r[what]["ratio"]
            if ratio is not None:
                checks.append(
                    (
                        f"{k}: warm {what}, remotekit / best peer",
                        f"{ratio:.2f}x",
                        f"<= {TARGET}x",
                        ratio <= TARGET,
                    )
                )
    print_checks(figures, checks)


if __name__ == "__main__":
    sys.exit(main())
