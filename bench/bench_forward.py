"""Forward benchmark: remotekit's port forward vs ``ssh -L``, same server, same sshd, same run.

A server on the node itself (127.0.0.1 behind the test sshd: tests/harness.py) sends N MB on
each connection (download), or reads N MB and answers the count (upload). A client process
(not this one: as a browser would be) times the transfer through:

  ssh -L      OpenSSH's own forward: `ssh -N -L LOCAL:127.0.0.1:PORT` (direct-tcpip channel)
  remotekit   Target.forward(PORT): the relay started by `python -c LOADER` over an exec channel
  paramiko    the ceiling of any paramiko path: one exec channel running `head -c N /dev/zero`,
              read in this process with no relay, no socket here (what remotekit rides on)

N interleaved pairs (ssh -L, then remotekit); median MB/s and median ratio; target: remotekit / ssh -L >= 0.5x (download).

Run: .venv/bin/python bench/bench_forward.py [--mb 200] [--runs 5]
(writes bench/results/forward.json)
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import remotekit  # noqa: E402
from tests.harness import SSHServer, free_port, venv_prefix  # noqa: E402

TARGET = 0.5

#: argv: PORT MB. Each connection: "d" -> send MB MiB then close; "u" -> read MB MiB, answer the
#: count (no half-close: remotekit's forward closes both ways at EOF, as kubectl port-forward).
SERVER = r"""
import socket, sys, threading
port, mb = int(sys.argv[1]), int(sys.argv[2])
block = bytes(range(256)) * 4096
def serve(c):
    with c:
        if c.recv(1) == b"d":
            for _ in range(mb):
                c.sendall(block)
        else:
            n = 0
            while n < mb << 20 and (data := c.recv(1 << 18)):
                n += len(data)
            c.sendall(str(n).encode())
s = socket.create_server(("127.0.0.1", port), backlog=64)
print("up", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

#: argv: PORT MB MODE. Prints the seconds the transfer took.
CLIENT = r"""
import socket, sys, time
port, mb, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
c = socket.create_connection(("127.0.0.1", port))
t0 = time.perf_counter()
n = 0
if mode == "d":
    c.sendall(b"d")
    while data := c.recv(1 << 18):
        n += len(data)
else:
    c.sendall(b"u")
    block = bytes(1 << 20)
    for _ in range(mb):
        c.sendall(block)
    n = int(c.recv(64) or 0)
dt = time.perf_counter() - t0
assert n == mb << 20, (n, mb << 20)
print(dt)
"""


def timed(port: int, mb: int, mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, str(port), str(mb), mode],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return float(out.stdout)


def median(fn: Callable[[], float], runs: int) -> float:
    return statistics.median(fn() for _ in range(runs))


def wait_listening(port: int, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def paramiko_ceiling(t: remotekit.Target, mb: int) -> float:
    """Seconds to read ``mb`` MiB from one exec channel (no relay, no local socket)."""
    conn = t.transport._connected()  # type: ignore[attr-defined]
    chan = conn.client.get_transport().open_session()
    t0 = time.perf_counter()
    chan.exec_command(f"head -c {mb << 20} /dev/zero")
    n = 0
    while data := chan.recv(1 << 18):
        n += len(data)
    chan.close()
    assert n == mb << 20
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    mb = args.mb
    work = Path(tempfile.mkdtemp(prefix="rk-bench-forward-"))
    server = SSHServer(work / "sshd").start()
    port = free_port()
    backend = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), str(mb)], stdout=subprocess.PIPE
    )
    ssh_port = free_port()
    ssh = subprocess.Popen(
        ["ssh", "-N", "-p", str(server.port), "-i", str(server.client_key),
         "-o", f"UserKnownHostsFile={server.known_hosts}", "-o", "StrictHostKeyChecking=yes",
         "-o", "BatchMode=yes", "-L", f"{ssh_port}:127.0.0.1:{port}",
         f"{server.user}@127.0.0.1"],
    )  # fmt: skip
    figures: dict[str, object] = {"mb": mb, "runs": args.runs}
    try:
        assert backend.stdout is not None and backend.stdout.readline().strip() == b"up"
        wait_listening(ssh_port)
        inv_file = work / "hosts.yaml"
        inv_file.write_text(json.dumps({"hosts": {"node": server.host_yaml(venv=venv_prefix())}}))
        inv = remotekit.load_inventory(inv_file)
        with inv.target("node") as t, t.forward(port) as fwd:
            cipher = t.transport._connected().client.get_transport().remote_cipher  # type: ignore[attr-defined]
            figures["paramiko_cipher"] = cipher
            for mode, label in (("d", "download"), ("u", "upload")):
                # interleaved pairs: the machine's load drifts; each pair sees the same load
                pairs = [(timed(ssh_port, mb, mode), timed(fwd.local_port, mb, mode))]
                pairs += [
                    (timed(ssh_port, mb, mode), timed(fwd.local_port, mb, mode))
                    for _ in range(args.runs - 1)
                ]
                by_ssh = statistics.median(a for a, _ in pairs)
                ours = statistics.median(b for _, b in pairs)
                ratio = statistics.median(a / b for a, b in pairs)
                figures[label] = {
                    "ssh_L_MBps": round(mb / by_ssh, 1),
                    "remotekit_MBps": round(mb / ours, 1),
                    "ratio": round(ratio, 2),
                }
                verdict = "OK" if ratio >= TARGET else f"below the {TARGET}x target"
                print(
                    f"{label:8s} {mb} MB  ssh -L {mb / by_ssh:7.1f} MB/s   remotekit "
                    f"{mb / ours:7.1f} MB/s   ratio {ratio:4.2f}x (median of pairs)  {verdict}",
                    flush=True,
                )
            ceiling = median(lambda: paramiko_ceiling(t, mb), args.runs)
            figures["paramiko_exec_channel_MBps"] = round(mb / ceiling, 1)
            print(
                f"paramiko ceiling: one exec channel, no relay: {mb / ceiling:7.1f} MB/s "
                f"(cipher {cipher})",
                flush=True,
            )
    finally:
        ssh.terminate()
        ssh.wait()
        backend.kill()
        backend.wait()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "forward.json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
