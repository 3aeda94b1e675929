"""NumPy files (``.npy``, ``.npz``) checked by remote/ckpt.py without torch and without
pickle: the files are written by NumPy itself (``np.save``, ``np.savez``,
``np.savez_compressed``); the far side runs with torch unimportable, and once more with NumPy
unimportable too (the standard library reads the header and the values). Hostile headers are
written by the documented layout (NumPy's ``numpy/lib/format.py``).
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from remotekit.remote.ckpt.formats import open_file
from remotekit.remote.ckpt.options import CkptOptions
from tests.ckpt_kit import PATHS, blocked, blocked_for, patch_zip, run, without

np = pytest.importorskip("numpy", reason="NumPy writes the fixtures")


def counts(rec: dict[str, Any]) -> dict[str, tuple[int, int, int, int]]:
    return {
        b["name"]: (b["nan"], b["posinf"], b["neginf"], b["first_index"])
        for b in rec["bad_tensors"]
    }


class Unpickled:
    """An object whose unpickling makes a directory: proof that a pickle was loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


@pytest.mark.parametrize("path", PATHS)
def test_npy_and_npz_files_are_scanned_without_torch_or_pickle(tmp_path: Path, path: str) -> None:
    """np.save, np.savez (stored members: read in place) and np.savez_compressed (unpacked
    first): NaN and +-Inf counted per array with first indexes, integers "other", an object
    array named in a note and never unpickled."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 9)).astype(np.float32)
    w[3, 4] = np.nan
    h = rng.standard_normal(300).astype(np.float16)
    h[299] = -np.inf
    d = rng.standard_normal(77)
    d[0] = np.inf
    marker = tmp_path / "unpickled"
    files = tmp_path / "ckpts"
    files.mkdir()
    np.save(files / "w.npy", w)
    np.savez(files / "stored.npz", w=w, h=h, steps=np.arange(5), o=np.array([Unpickled(marker)]))
    np.savez_compressed(files / "packed.npz", d=d, clean=np.ones(1000, np.float32))

    r = without(tmp_path, blocked_for(path), "scan", str(files), "--options", '{"chunk_elems": 64}')
    recs = r.by_path
    assert not marker.exists(), "an object array was unpickled"
    one = recs[str(files / "w.npy")]
    assert (one["format"], one["status"], one["error"]) == ("npy", "bad", None), (one, r.stderr)
    assert counts(one) == {"w": (1, 0, 0, 3 * 9 + 4)}
    stored = recs[str(files / "stored.npz")]
    assert (stored["format"], stored["status"], stored["error"]) == ("npz", "bad", None), stored
    assert counts(stored) == {"w": (1, 0, 0, 31), "h": (0, 0, 1, 299)}
    assert stored["other"] == {"integer": 1}
    assert any(n.startswith("o: an object array") for n in stored["notes"]), stored["notes"]
    packed = recs[str(files / "packed.npz")]
    assert (packed["format"], packed["status"]) == ("npz", "bad"), packed
    assert counts(packed) == {"d": (0, 1, 0, 0)}
    finite = np.concatenate([w[np.isfinite(w)], h[np.isfinite(h)].astype(np.float32)])
    assert stored["max_abs_weights"] == float(np.abs(finite).max())
    assert r.code == 1


@pytest.mark.parametrize("path", PATHS)
def test_inspect_of_an_npz_names_dtypes_and_shapes_without_pickle(
    tmp_path: Path, path: str
) -> None:
    marker = tmp_path / "unpickled"
    p = tmp_path / "m.npz"
    np.savez_compressed(
        p,
        emb=np.zeros((3, 4), np.float16),
        ids=np.arange(6, dtype=np.int32),
        o=np.array([Unpickled(marker)]),
    )
    r = without(tmp_path, blocked_for(path), "inspect", str(p))
    info = r.one("inspect")
    assert (info["ok"], info["format"]) == (True, "npz"), (info, r.stderr)
    assert {t["name"]: (t["dtype"], t["shape"]) for t in r.of("tensor")} == {
        "emb": ("float16", [3, 4]),
        "ids": ("int32", [6]),
    }
    assert any(n.startswith("o: an object array") for n in info["notes"]), info["notes"]
    assert not marker.exists()


def test_diff_of_two_npz_files_needs_no_torch(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal(500).astype(np.float32)
    b = a + rng.standard_normal(500).astype(np.float32) * 0.01
    np.savez(tmp_path / "a.npz", w=a)
    np.savez_compressed(tmp_path / "b.npz", w=b)
    r = without(tmp_path, ("torch",), "diff", str(tmp_path / "a.npz"), str(tmp_path / "b.npz"))
    d = r.one("diff")
    assert d["error"] is None, (d, r.stderr)
    x, y = a.astype(np.float64), b.astype(np.float64)
    want = float(np.linalg.norm(y - x) / np.linalg.norm(x))
    assert d["top_weights"][0]["rel_change"] == pytest.approx(want, rel=1e-9)


def npy(header: bytes, data: bytes = b"", version: int = 1) -> bytes:
    """An .npy file by the documented layout, ``header`` as given (it may lie)."""
    width = "<H" if version == 1 else "<I"
    return b"\x93NUMPY" + bytes((version, 0)) + struct.pack(width, len(header)) + header + data


def head(descr: str, shape: str) -> bytes:
    return f"{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, }}".encode()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (npy(head("'<f4'", "(1000000,)"), b"\0" * 64), "truncated: float32 [1000000] needs"),
        (npy(head("'<f4'", "(-4,)"), b"\0" * 16), "damaged .npy header (shape"),
        (npy(b"__import__('os').system('id')"), "damaged .npy header (ValueError)"),
        (npy(b"[" * 5000 + b"]" * 5000), "damaged .npy header"),
        (npy(b"{'descr': '<f4'}"), "not a dict of descr, fortran_order and shape"),
        (npy(b" " * 20000, version=2), "more than 10000"),
        (b"\x93NUMPY\x01\x00\xff\x00{'de", "the .npy header needs 265 bytes"),
        (b"\x93NUMPY\x07\x00\x10\x00" + b" " * 16, "version 7"),
    ],
    ids=[
        "data-past-the-end",
        "negative-shape",
        "code",
        "deep",
        "keys",
        "long-header",
        "cut",
        "version",
    ],
)
def test_hostile_npy_headers_are_refused_naming_the_file(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    p = tmp_path / "x.npy"
    p.write_bytes(content)
    rec = without(tmp_path, ("torch",), "scan", str(p)).by_path[str(p)]
    assert rec["status"] == "error" and reason in rec["error"], rec
    assert rec["format"] == "npy"


def test_an_npz_member_past_the_end_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "m.npz"
    np.savez(p, w=np.zeros(4096, np.float32))
    raw = p.read_bytes()
    # cut the member's values but keep the central directory (which says how long it is)
    cut = raw.index(b"PK\x01\x02")
    p.write_bytes(raw[: cut - 8000] + raw[cut:])
    rec = without(tmp_path, ("torch",), "scan", str(p)).by_path[str(p)]
    assert rec["status"] == "error", rec
    assert "damaged .npz archive: no local header for 'w.npy'" in rec["error"], rec


# ------------------------------------------------------- compressed members that lie (zip bombs)

BOMB = 64 << 20  # what the lying member inflates to (its deflated bytes: ~64 KiB)
FILE_LIMIT = 2 << 20  # RLIMIT_FSIZE of the scan: it may write no file larger


def _bomb(path: Path, declared: int | None) -> tuple[Path, int]:
    """An .npz of ``ok`` (an honest compressed member with a NaN) and ``w``: its .npy header
    says 1024 float32 values, its deflated data inflates to :data:`BOMB` bytes; ``declared``:
    the unpacked size the zip then claims for it (None: the truth). (archive, header bound)"""
    buf = io.BytesIO()
    np.save(buf, np.zeros(1024, np.float32))
    honest = buf.getvalue()
    ok = io.BytesIO()
    np.save(ok, np.array([1.0, np.nan, 2.0], np.float32))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("ok.npy", ok.getvalue())
        with zf.open("w.npy", "w") as out:
            out.write(honest)
            zeros = bytes(1 << 20)
            for _ in range((BOMB - len(honest)) >> 20):
                out.write(zeros)
    if declared is not None:
        patch_zip(path, "w.npy", size=declared)
    return path, len(honest)


_FSIZE = (
    "import resource, os, sys; "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1]))); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


@pytest.mark.parametrize("declared", [None, 0xFFFFFFF0], ids=["declared-true", "declared-lies"])
def test_a_compressed_member_inflating_past_its_header_is_refused_unwritten(
    tmp_path: Path, declared: int | None
) -> None:
    """A zip bomb in an .npz: the member is unpacked no further than its own header says it
    holds (the zip's declared size, true or a lie, is larger), refused by name with that
    bound, the temp dir left empty, the other member still checked. The scan may write no
    file over 2 MiB (before: the member's 64 MiB went to a temp file, whatever its header
    or the zip said)."""
    path, bound = _bomb(tmp_path / "bomb.npz", declared)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    path_env = os.pathsep.join(
        filter(None, [blocked(tmp_path, "torch"), os.environ.get("PYTHONPATH")])
    )
    r = run(
        "scan",
        str(path),
        prefix=(
            sys.executable,
            "-c",
            _FSIZE,
            str(FILE_LIMIT),
            "/usr/bin/env",
            "TMPDIR=" + str(scratch),
            "PYTHONPATH=" + path_env,
        ),
    )
    rec = r.by_path[str(path)]
    assert rec["status"] == "error", (rec, r.stderr)
    assert (
        f"member 'w' unpacks to more than the {bound} bytes its .npy header says it holds"
        in rec["error"]
    ), rec
    assert counts(rec) == {"ok": (1, 0, 0, 1)}, rec
    assert list(scratch.iterdir()) == []


def test_a_compressed_member_with_no_room_in_the_temp_dir_is_refused_before_unpacking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temp dir's free space is checked against the member's bound before a byte is
    written: the large member is refused naming the folder, the small one still read."""
    p = tmp_path / "m.npz"
    np.savez_compressed(p, big=np.zeros(1 << 18, np.float32), small=np.ones(8, np.float32))
    real = shutil.disk_usage
    room = (1 << 20) + 100_000  # base.UNPACK_CHUNK (kept free) + the small member, not the big

    def usage(folder: str) -> Any:
        return real(folder)._replace(free=room)

    monkeypatch.setattr(shutil, "disk_usage", usage)
    src = open_file(str(p), CkptOptions())
    try:
        assert [e.name for e in src.entries] == ["small"], src.problems
        assert len(src.problems) == 1 and src.problems[0].startswith(
            f"member 'big': up to {(1 << 20) + 128} bytes to unpack"
        ), src.problems
        assert "no room for them in" in src.problems[0]
    finally:
        src.close()
