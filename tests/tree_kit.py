"""Trees for the copy tests (``sync``, and ``get``/``put`` of a folder): one made here with
every kind a copy must carry, and a snapshot of a tree read by an independent script (there
through a target, here as a subprocess), never by the code under test. A plain module (no
tests, no fixtures), shared by tests/sync and tests/cli.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SNAPSHOT = """\
import hashlib, json, os, stat, sys
root = sys.argv[1]
out = {}
for d, dirs, files in os.walk(root):
    for n in dirs + files:
        p = os.path.join(d, n)
        st = os.lstat(p)
        rel = os.path.relpath(p, root)
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ["l", os.readlink(p)]
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ["d", stat.S_IMODE(st.st_mode)]
        else:
            with open(p, "rb") as f:
                out[rel] = ["f", stat.S_IMODE(st.st_mode), hashlib.sha256(f.read()).hexdigest()]
print(json.dumps(out, sort_keys=True))
"""


def local_snapshot(root: Path) -> dict[str, list[Any]]:
    out = subprocess.run(
        [sys.executable, "-c", SNAPSHOT, str(root)], capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout))


def make_tree(root: Path) -> Path:
    (root / "pkg" / "sub dir").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "pkg" / "__init__.py").write_text("x = 1\n")
    (root / "pkg" / "sub dir" / "naïve café ü.txt").write_text("unicode and spaces\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "secret.key").write_text("k")
    (root / "secret.key").chmod(0o600)
    (root / "suid").write_text("s")
    (root / "suid").chmod(0o4755)
    (root / "empty.txt").write_bytes(b"")
    (root / "blob.bin").write_bytes(os.urandom(3 << 20))
    (root / "pkg" / "link").symlink_to("../run.sh")
    (root / "abs-link").symlink_to("/etc/hostname")
    (root / "pkg").chmod(0o750)
    return root


def expected(src: Path) -> dict[str, list[Any]]:
    snap = local_snapshot(src)
    for v in snap.values():
        if v[0] in ("f", "d"):
            v[1] &= 0o777  # setuid, setgid, sticky are never set there
    return snap
