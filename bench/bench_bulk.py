"""Bulk bytes benchmark: put/get of N MB through a real sshd -> real LXC, against the bare pipe.

Through local -> sshd (127.0.0.1) -> ``lxc-attach`` -> a real busybox LXC container, taking
turns run after run, p50 of R runs:

  remotekit  ``t.put(blob, "/tmp/put")`` / ``t.get("/tmp/src", local)`` on a warm target
             (the resident agent up)
  bare pipe  ``ssh -S ctl host 'lxc-attach -n N --clear-env -- sh -c "cat > /tmp/bare"' < blob``
             and ``... -- cat /tmp/src > local``, over an OpenSSH ControlMaster (no handshake)
  targets    put / bare <= 1.2x, get / bare <= 1.2x (issue 34)

With each, the CPU seconds every process of both ends spent on it (this process and its
children, sshd and everything below it: the agent, runners, lxc-attach), which a loaded
machine inflates less than the wall time: on 2 cores shared with others, the wall time of
each side follows the CPU it needs.

Then the caller's side alone (``--raw``): one exec channel carrying N MB to ``cat >
/dev/null`` there and back from ``cat FILE``, paramiko (remotekit's channel, its ciphers) vs
OpenSSH's ``ssh`` binary over the ControlMaster, each with its own cipher choice and with
``-c aes128-gcm@openssh.com`` (paramiko's first choice): which one to use for bulk streams.

Pull bodies (``--pull``): ``t.get(DIR, local)`` of a directory there (a pull: list, then one
read step whose bodies come as raw frames) of 100 x 1 MB files and of 1 x 100 MB, into an
empty local directory each run, against the bare ``ssh -S ctl host 'lxc-attach ... -- tar -C
DIR -c .' | tar -C local -x`` in the same run (issue 34, item 3).

Memory (``--big``, MB; default 1024): the same put and get of a ``--big`` file, each in a
fresh Python process here whose peak RSS (``ru_maxrss``) is read when it exits, and the peak
RSS (VmHWM) of every process there under ``lxc-attach`` while it runs, against the same for
a 1 MB file: the growth must stay below 64 MB.

Run: .venv/bin/python bench/bench_bulk.py [--mb 100] [--runs 7] [--big 1024] [--raw] [--pull]
(as root, with LXC installed: see .ci/run; writes bench/results/bulk.json)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import remotekit  # noqa: E402
from bench.bench_engine import controlmaster, interleaved_medians, print_checks  # noqa: E402
from bench.bench_layers import _tool  # noqa: E402
from remotekit.quoting import join  # noqa: E402
from tests import runtimes  # noqa: E402
from tests.harness import SSHServer, venv_prefix  # noqa: E402

TARGET = 1.2
GROWTH_MB = 64

#: Run in a fresh process: one put or get of argv[2], then its peak RSS (KiB) on stdout.
CHILD = """
import json, resource, sys
sys.path.insert(0, %r)
import remotekit
op, local, there, inv = sys.argv[1:5]
with remotekit.load_inventory(inv).target("lxc") as t:
    t.run(["true"])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    (t.put(local, there, timeout=900) if op == "put" else t.get(there, local, timeout=900))
print(json.dumps([base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))
"""


def far_peaks(stop: threading.Event, root_pid: int, peaks: dict[int, int]) -> None:
    """Until ``stop``: the VmHWM (KiB) of every process below ``root_pid`` (sshd), by pid."""
    while not stop.is_set():
        for pid in below(root_pid):
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks[pid] = max(peaks.get(pid, 0), int(line.split()[1]))
            except OSError:
                pass
        time.sleep(0.02)


def below(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def ticks(root: int) -> float:
    """CPU seconds of ``root`` and every process below it (live ones: their own and their
    reaped children's; the dead: in their parents' figures)."""
    total = 0
    for pid in [root, *below(root)]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def timed(
    fns: dict[str, Any], runs: int, roots: list[int], before: Any = lambda: None
) -> dict[str, float]:
    """p50 wall seconds (``name``) and CPU seconds of both ends (``name_cpu``) of each of
    ``fns``, taking turns run after run, after one warm call each; ``before()`` runs, not
    timed, before each call."""
    for fn in fns.values():
        before()
        fn()
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(runs):
        for k, fn in fns.items():
            before()
            c0, t0 = sum(map(ticks, roots)), time.perf_counter()
            fn()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(sum(map(ticks, roots)) - c0)
    out = {k: statistics.median(v) for k, v in wall.items()}
    out.update({f"{k[:-2]}_cpu_s": statistics.median(v) for k, v in cpu.items()})
    return out


def memory(inv_file: Path, work: Path, sshd_pid: int, mb: int) -> dict[str, float]:
    """Peak RSS here (growth over a warm target) and there, for a put and a get of ``mb`` MB."""
    blob = work / f"mem-{mb}"
    with blob.open("wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(mb):
            f.write(chunk)
    out: dict[str, float] = {}
    for op in ("put", "get"):
        stop, peaks = threading.Event(), {}
        watcher = threading.Thread(target=far_peaks, args=(stop, sshd_pid, peaks))
        watcher.start()
        local = blob if op == "put" else work / f"got-{mb}"
        try:
            done = subprocess.run(
                [sys.executable, "-c", CHILD % str(ROOT), op, str(local), "/tmp/mem", str(inv_file)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
        finally:
            stop.set()
            watcher.join()
        base, peak = json.loads(done.stdout.strip().splitlines()[-1])
        out[f"{op}_here_growth_mb"] = (peak - base) / 1024
        out[f"{op}_there_peak_mb"] = max(peaks.values(), default=0) / 1024
    blob.unlink()
    (work / f"got-{mb}").unlink(missing_ok=True)
    return out


def raw(server: SSHServer, cm: list[str], hop: list[str], work: Path, mb: int, runs: int) -> dict:
    """One channel, N MB each way: paramiko (remotekit's transport) vs the ssh binary."""
    import paramiko

    from remotekit.transports.ssh import _Transport

    blob = work / "blob"
    t = _Transport(("127.0.0.1", server.port))
    t.connect()
    t.auth_publickey(server.user, paramiko.Ed25519Key.from_private_key_file(str(server.client_key)))
    sink = join([*hop, "sh", "-c", "cat > /dev/null"])
    source = join([*hop, "cat", "/tmp/src"])

    def pm_put() -> None:
        ch = t.open_session()
        ch.exec_command(sink)
        view = memoryview(blob.read_bytes())
        for at in range(0, len(view), 1 << 16):
            ch.sendall(view[at : at + (1 << 16)])
        ch.shutdown_write()
        assert ch.recv_exit_status() == 0
        ch.close()

    def pm_get() -> None:
        ch = t.open_session()
        ch.exec_command(source)
        n = 0
        while data := ch.recv(1 << 20):
            n += len(data)
        assert ch.recv_exit_status() == 0 and n == mb << 20
        ch.close()

    def ssh_put(opts: list[str]) -> None:
        with blob.open("rb") as f:
            subprocess.run([*cm[:1], *opts, *cm[1:], sink], stdin=f, check=True)

    def ssh_get(opts: list[str]) -> None:
        with (work / "raw-got").open("wb") as f:
            subprocess.run([*cm[:1], *opts, *cm[1:], source], stdout=f, check=True)

    gcm = ["-c", "aes128-gcm@openssh.com"]
    try:
        return interleaved_medians(
            {
                "paramiko_put_s": pm_put,
                "ssh_put_s": lambda: ssh_put([]),
                "ssh_gcm_put_s": lambda: ssh_put(gcm),
                "paramiko_get_s": pm_get,
                "ssh_get_s": lambda: ssh_get([]),
                "ssh_gcm_get_s": lambda: ssh_get(gcm),
            },
            runs,
        )
    finally:
        t.close()


def pulls(
    t: Any, cm: list[str], hop: list[str], work: Path, runs: int, roots: list[int]
) -> dict[str, Any]:
    """A directory pulled (``t.get``) against the bare ``tar c | tar x`` pipe: 100 x 1 MB
    and 1 x 100 MB, each into an empty local directory."""
    make = (
        "mkdir -p /tmp/pull-many /tmp/pull-one && for i in $(seq 100); do "
        "head -c 1048576 /dev/urandom > /tmp/pull-many/f$i; done && "
        "head -c 104857600 /dev/urandom > /tmp/pull-one/big"
    )
    subprocess.run([*cm, join([*hop, "sh", "-c", make])], check=True)
    out: dict[str, Any] = {}
    for name, files in (("many", 100), ("one", 1)):
        there = f"/tmp/pull-{name}"
        dest = work / f"pulled-{name}"

        def fresh(dest: Path = dest) -> None:
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir()

        def ours(there: str = there, dest: Path = dest, n: int = files) -> None:
            r = t.get(there, dest / "x")
            assert len(r.sent) == n, r

        def bare(there: str = there, dest: Path = dest) -> None:
            (dest / "x").mkdir()
            far = subprocess.Popen(
                [*cm, join([*hop, "tar", "-C", there, "-c", "."])], stdout=subprocess.PIPE
            )
            subprocess.run(["tar", "-C", str(dest / "x"), "-x"], stdin=far.stdout, check=True)
            assert far.wait() == 0

        m = timed({"pull_s": ours, "bare_pull_s": bare}, runs, roots, fresh)
        out[name] = m
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--big", type=int, default=1024, help="MB for the memory check (0: skip)")
    ap.add_argument("--raw", action="store_true", help="also paramiko vs the ssh binary")
    ap.add_argument("--pull", action="store_true", help="only the pull suite (issue 34, 3)")
    args = ap.parse_args()
    why = runtimes.missing("lxc")
    if why is not None:
        print(f"skip: {why}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="rk-bench-bulk-"))
    figures: dict[str, Any] = {"mb": args.mb, "runs": args.runs}
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, True)
        server = SSHServer(work / "sshd")
        stack.callback(server.stop)
        server.start()
        _, cm = stack.enter_context(controlmaster(server, work / "ctl"))
        ct = runtimes.LxcContainer()
        stack.callback(ct.stop)
        ct.start()
        hop = [_tool("lxc-attach"), "-n", ct.name, "--clear-env", "--"]
        inv_file = work / "hosts.yaml"
        host = server.host_yaml(lxc={"name": ct.name, "bin": hop[0]}, venv=venv_prefix())
        inv_file.write_text(json.dumps({"hosts": {"lxc": host}}))
        blob = work / "blob"
        with blob.open("wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(args.mb):
                f.write(chunk)
        with blob.open("rb") as f:  # the file get reads there
            subprocess.run([*cm, join([*hop, "sh", "-c", "cat > /tmp/src"])], stdin=f, check=True)
        t = stack.enter_context(remotekit.load_inventory(inv_file).target("lxc"))
        t.run(["true"])
        got = work / "got"

        def bare_put() -> None:
            with blob.open("rb") as f:
                argv = [*cm, join([*hop, "sh", "-c", "cat > /tmp/bare"])]
                subprocess.run(argv, stdin=f, check=True)

        def bare_get() -> None:
            with got.open("wb") as f:
                subprocess.run([*cm, join([*hop, "cat", "/tmp/src"])], stdout=f, check=True)

        assert server.proc is not None
        if args.pull:
            figures["pull"] = pulls(t, cm, hop, work, args.runs, [os.getpid(), server.proc.pid])
            figures["load"] = os.getloadavg()
            report_pull(figures)
            out = ROOT / "bench" / "results"
            out.mkdir(parents=True, exist_ok=True)
            (out / "bulk-pull.json").write_text(json.dumps(figures, indent=2) + "\n")
            return 0
        medians = timed(
            {
                "put_s": lambda: t.put(blob, "/tmp/put"),
                "bare_put_s": bare_put,
                "get_s": lambda: t.get("/tmp/src", got),
                "bare_get_s": bare_get,
            },
            args.runs,
            [os.getpid(), server.proc.pid],
        )
        assert got.read_bytes() == blob.read_bytes()
        figures.update(medians)
        if args.raw:
            figures["raw"] = raw(server, cm, hop, work, args.mb, args.runs)
        if args.big:
            small = memory(inv_file, work, server.proc.pid, 1)
            big = memory(inv_file, work, server.proc.pid, args.big)
            figures["memory"] = {"1MB": small, f"{args.big}MB": big}
        figures["load"] = os.getloadavg()
    report(figures, args)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bulk.json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def report(f: dict[str, Any], args: argparse.Namespace) -> None:
    mb = args.mb
    shown = {
        k: f[k] * 1000
        for op in ("put", "get")
        for k in (f"{op}_s", f"bare_{op}_s", f"{op}_cpu_s", f"bare_{op}_cpu_s")
    }
    checks = [
        (f"put {mb} MB / bare pipe", f"{f['put_s'] / f['bare_put_s']:.2f}x", f"<= {TARGET}x",
         f["put_s"] / f["bare_put_s"] <= TARGET),
        (f"get {mb} MB / bare pipe", f"{f['get_s'] / f['bare_get_s']:.2f}x", f"<= {TARGET}x",
         f["get_s"] / f["bare_get_s"] <= TARGET),
        ("put CPU / bare pipe's (info)", f"{f['put_cpu_s'] / f['bare_put_cpu_s']:.2f}x", "-", True),
        ("get CPU / bare pipe's (info)", f"{f['get_cpu_s'] / f['bare_get_cpu_s']:.2f}x", "-", True),
    ]  # fmt: skip
    if "memory" in f:
        small, big = f["memory"]["1MB"], f["memory"][f"{args.big}MB"]
        for op in ("put", "get"):
            for side in ("here_growth", "there_peak"):
                k = f"{op}_{side}_mb"
                grew = big[k] - small[k]
                shown[f"{op} {side} {args.big}MB/1MB"] = big[k]
                checks.append(
                    (f"{op} {args.big} MB: {side} vs 1 MB", f"+{grew:.0f} MB",
                     f"< +{GROWTH_MB} MB", grew < GROWTH_MB)
                )  # fmt: skip
    print()
    print_checks({f"{k} ms" if k.endswith("_s") else k: v for k, v in shown.items()}, checks)
    if "raw" in f:
        print()
        for k, v in f["raw"].items():
            print(f"raw {k:20s} {v * 1000:8.1f} ms  {mb / v:6.0f} MB/s")
    print(f"load average {f['load'][0]:.1f} {f['load'][1]:.1f} {f['load'][2]:.1f} (2 cores)")


def report_pull(f: dict[str, Any]) -> None:
    for name, label in (("many", "100 x 1 MB"), ("one", "1 x 100 MB")):
        m = f["pull"][name]
        print(
            f"pull {label}: remotekit {m['pull_s'] * 1000:.0f} ms "
            f"(CPU {m['pull_cpu_s']:.2f} s), tar pipe {m['bare_pull_s'] * 1000:.0f} ms "
            f"(CPU {m['bare_pull_cpu_s']:.2f} s): {m['pull_s'] / m['bare_pull_s']:.2f}x"
        )
    print(f"load average {f['load'][0]:.1f} {f['load'][1]:.1f} {f['load'][2]:.1f} (2 cores)")


if __name__ == "__main__":
    sys.exit(main())
