"""Scans of safetensors and GGUF files without torch: remote/ckpt.py run as it runs there,
with torch made unimportable (a ``torch`` module on PYTHONPATH that raises, as a missing
install does), and once more with NumPy made unimportable too (the standard library's path).

The files are written by the safetensors package itself (tests/ckpt_factory.py) and by the
``gguf`` package (llama.cpp's writer; skipped without it), damaged ones by the documented
layouts; the expected counts are computed here with torch from the same tensors.
"""

from __future__ import annotations

import math
import os
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from remotekit.remote.ckpt.values import DTYPES, check_raw
from tests import ckpt_factory as cf
from tests.ckpt_kit import PATHS, SCRIPT, blocked, blocked_for, scan_without, without


def expected(tensors: dict[str, torch.Tensor], nonneg: set[str]) -> dict[str, Any]:
    """What a scan reports, computed with torch: totals and one bad_tensors entry per tensor."""
    out: dict[str, Any] = {"nan": 0, "posinf": 0, "neginf": 0, "negative": 0, "bad": {}}
    maxabs: dict[str, float | None] = {"weights": None, "optimizer": None}
    for name, t in tensors.items():
        x = t.float().reshape(-1)
        nan, pos, neg = torch.isnan(x), x == math.inf, x == -math.inf
        negative = (x < 0) if name in nonneg else torch.zeros_like(nan)
        bad = nan | pos | neg | negative
        counts = [int(m.sum()) for m in (nan, pos, neg, negative)]
        for key, n in zip(("nan", "posinf", "neginf", "negative"), counts):
            out[key] += n
        if bool(bad.any()):
            out["bad"][name] = {
                "dtype": str(t.dtype).replace("torch.", ""),
                "nan": counts[0],
                "posinf": counts[1],
                "neginf": counts[2],
                "negative": counts[3],
                "first_index": int(bad.nonzero()[0]),
            }
        fin = torch.isfinite(x)
        if bool(fin.any()):
            sec = "optimizer" if name.startswith("optimizer.") else "weights"
            m = float(x[fin].abs().max())
            maxabs[sec] = m if maxabs[sec] is None else max(maxabs[sec], m)  # type: ignore[type-var]
    out["max_abs"] = maxabs
    return out


def assert_record_matches(rec: dict[str, Any], want: dict[str, Any]) -> None:
    for key in ("nan", "posinf", "neginf"):
        assert rec[key + "_weights"] + rec[key + "_optimizer"] == want[key], (key, rec)
    assert rec["negative_exp_avg_sq"] == want["negative"]
    got = {
        b["name"]: {
            k: b[k] for k in ("dtype", "nan", "posinf", "neginf", "negative", "first_index")
        }
        for b in rec["bad_tensors"]
    }
    assert got == want["bad"]
    assert rec["max_abs_weights"] == want["max_abs"]["weights"]
    assert rec["max_abs_optimizer"] == want["max_abs"]["optimizer"]


@pytest.mark.parametrize("path", PATHS)
def test_a_safetensors_scan_finds_nan_and_inf_without_torch(tmp_path: Path, path: str) -> None:
    """float32, float16 and bfloat16 (no NumPy type: read as bits), and a bad value in the
    last chunk of a tensor; torch cannot be imported, so the scan must not need it."""
    g = torch.Generator().manual_seed(0)
    tensors = {
        "clean.weight": torch.randn(40, 8, generator=g),
        "f32.weight": torch.randn(40, 8, generator=g),
        "f16.weight": torch.randn(40, 8, generator=g).half(),
        "bf16.weight": torch.randn(40, 8, generator=g).bfloat16(),
        "last.weight": torch.randn(1000, generator=g),
        "optimizer.state.0.exp_avg_sq": torch.rand(64, generator=g).bfloat16(),
    }
    tensors["f32.weight"][3, 4] = math.nan
    tensors["f16.weight"][0, 1] = math.inf
    tensors["bf16.weight"][39, 7] = -math.inf
    tensors["bf16.weight"][20, 0] = math.nan
    tensors["last.weight"][999] = math.nan  # chunks of 64 values: index 999 is in the last
    tensors["optimizer.state.0.exp_avg_sq"][5] = -1.0
    p = tmp_path / "model.safetensors"
    cf.save_safetensors(tensors, p)

    r = scan_without(tmp_path, blocked_for(path), str(p), "--options", '{"chunk_elems": 64}')
    rec = r.by_path[str(p)]
    assert rec["status"] == "bad" and rec["error"] is None, (rec, r.stderr)
    assert r.code == 1
    assert_record_matches(rec, expected(tensors, {"optimizer.state.0.exp_avg_sq"}))
    assert rec["bad_tensors"][0]["section"] in ("weights", "optimizer")


FLOATS = [
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


@pytest.mark.parametrize("path", PATHS)
def test_the_torchless_checker_agrees_with_torch_on_every_float_dtype(
    tmp_path: Path, path: str
) -> None:
    """Random tensors of every float dtype safetensors has, NaN / +-Inf / negative values and
    -0.0 planted, second-moment slots among them, chunks that split tensors unevenly: the
    counts, first indexes and largest magnitudes are torch's, exactly."""
    rnd = random.Random(7)
    g = torch.Generator().manual_seed(7)
    tensors: dict[str, torch.Tensor] = {}
    nonneg = set()
    for i in range(36):
        dtype = FLOATS[i % len(FLOATS)]
        n = rnd.choice([1, 5, 97, 300, 2500])
        x = torch.randn(n, generator=g) * rnd.choice([1e-3, 1.0, 50.0])
        if i % 5 == 0:
            x = -x.abs()
        if i % 9 == 0:
            x[:] = -0.0
        for _ in range(rnd.choice([0, 0, 1, 3])):
            x[rnd.randrange(n)] = rnd.choice([math.nan, math.inf, -math.inf, -1.0, -0.0])
        name = f"w{i}"
        if i % 3 == 0:
            name = f"optimizer.state.{i}.exp_avg_sq"
            nonneg.add(name)
        tensors[name] = x.to(dtype)
    p = tmp_path / "all.safetensors"
    cf.save_safetensors(tensors, p)
    r = scan_without(
        tmp_path, blocked_for(path), str(p), "--max-bad", "100", "--options", '{"chunk_elems": 96}'
    )
    rec = r.by_path[str(p)]
    assert rec["error"] is None, (rec, r.stderr)
    assert_record_matches(rec, expected(tensors, nonneg))


def test_an_index_of_safetensors_shards_needs_no_torch(tmp_path: Path) -> None:
    cf.save_safetensors({"a": torch.ones(4)}, tmp_path / "model-00001.safetensors")
    cf.save_safetensors({"b": torch.full((4,), math.inf)}, tmp_path / "model-00002.safetensors")
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(
        '{"weight_map": {"a": "model-00001.safetensors", "b": "model-00002.safetensors"}}'
    )
    rec = scan_without(tmp_path, ("torch",), str(index)).by_path[str(index)]
    assert (rec["status"], rec["posinf_weights"]) == ("bad", 4), rec


ST_F32 = {"dtype": "F32"}


@pytest.mark.parametrize(
    ("header", "data_len", "reason"),
    [
        (
            {
                "a": {**ST_F32, "shape": [4], "data_offsets": [0, 16]},
                "b": {**ST_F32, "shape": [4], "data_offsets": [8, 24]},
            },
            24,
            "b [8, 24) overlaps a",
        ),
        (
            {"w": {**ST_F32, "shape": [1 << 20], "data_offsets": [0, 4 << 20]}},
            64,
            "past the end of the file",
        ),
        ({"w": {**ST_F32, "shape": [4], "data_offsets": [0, 8]}}, 8, "w: header gives 8 bytes"),
    ],
    ids=["overlap", "past-the-end", "size-mismatch"],
)
def test_lying_safetensors_headers_are_refused_without_torch(
    tmp_path: Path, header: dict[str, Any], data_len: int, reason: str
) -> None:
    p = cf.write_safetensors_header(tmp_path / "m.safetensors", header, data_len)
    rec = scan_without(tmp_path, ("torch",), str(p)).by_path[str(p)]
    assert rec["status"] == "error" and reason in rec["error"], rec


def test_a_header_length_past_the_end_is_refused_naming_the_file(tmp_path: Path) -> None:
    p = tmp_path / "cut.safetensors"
    p.write_bytes((1000).to_bytes(8, "little") + b'{"w": {"dtype": "F32"')
    rec = scan_without(tmp_path, ("torch",), str(p)).by_path[str(p)]
    assert rec["status"] == "error" and "header needs 1008 bytes" in rec["error"], rec
    assert rec["path"] == str(p)


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_a_safetensors_scan_keeps_memory_flat(tmp_path: Path, path: str) -> None:
    """Chunks out of a memory map, pages released after each: 128 MiB of values add far less
    than 128 MiB to the scan's peak RSS (worker included), with NumPy and without."""
    env = dict(os.environ, PYTHONPATH=blocked(tmp_path, *blocked_for(path)))

    def peak_rss(p: Path) -> int:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "scan", str(p)], stdout=subprocess.DEVNULL, env=env
        )
        _, status, usage = os.wait4(proc.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        return usage.ru_maxrss * 1024  # KiB on Linux; includes the worker (a waited child)

    small, big = tmp_path / "small.safetensors", tmp_path / "big.safetensors"
    cf.save_safetensors({"w": torch.zeros(16)}, small)
    size = 128 << 20
    cf.save_safetensors({"w": torch.zeros(size // 8), "v": torch.ones(size // 8)}, big)
    extra = peak_rss(big) - peak_rss(small)
    assert extra < size // 4, f"scanning {size >> 20} MiB added {extra >> 20} MiB of RSS"


# ------------------------------------------------------------------------------------ GGUF


@pytest.mark.parametrize("path", PATHS)
def test_a_gguf_scan_finds_nan_and_inf_without_torch(tmp_path: Path, path: str) -> None:
    """A GGUF written by llama.cpp's own writer: float32, float16 and bfloat16 tensors
    checked exactly, an integer tensor "other", a quantized one named in a note."""
    gguf = pytest.importorskip("gguf", reason="the gguf package writes the real file")
    np = pytest.importorskip("numpy")
    g = torch.Generator().manual_seed(3)
    tensors = {
        "blk.0.attn_q.weight": torch.randn(64, 32, generator=g),
        "blk.0.ffn_up.weight": torch.randn(16, 32, generator=g).half(),
        "blk.0.ffn_down.weight": torch.randn(300, generator=g).bfloat16(),
        "output_norm.weight": torch.randn(8, generator=g),
    }
    tensors["blk.0.attn_q.weight"][3, 4] = math.nan
    tensors["blk.0.ffn_up.weight"][15, 31] = math.inf
    tensors["blk.0.ffn_down.weight"][299] = -math.inf
    p = tmp_path / "model.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    for name, t in tensors.items():
        if t.dtype == torch.bfloat16:
            bits = t.view(torch.int16).numpy().view(np.uint8)
            # raw_shape is in bytes: the writer turns it into values by the type's size
            w.add_tensor(name, bits, raw_shape=bits.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, t.numpy())
    w.add_tensor("token_ids", np.arange(10, dtype=np.int32))
    rows = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
    q8 = gguf.quants.quantize(rows, gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor(
        "blk.1.q8.weight", q8, raw_shape=q8.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0
    )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    r = scan_without(tmp_path, blocked_for(path), str(p), "--options", '{"chunk_elems": 64}')
    rec = r.by_path[str(p)]
    assert (rec["status"], rec["format"], rec["error"]) == ("bad", "gguf", None), (rec, r.stderr)
    assert_record_matches(rec, expected(tensors, set()))
    assert rec["other"] == {"integer": 1}
    assert any("quantized" in n and "Q8_0" in n for n in rec["notes"]), rec["notes"]


def gguf_bytes(
    tensors: list[tuple[str, list[int], int, int]], data: bytes, n_tensors: int = -1
) -> bytes:
    """A GGUF v3 file by the documented layout: no metadata, ``tensors`` as (name, dims,
    ggml type, offset), padding to 32, then ``data``; ``n_tensors`` may lie."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) if n_tensors < 0 else n_tensors, 0)
    for name, dims, gtype, offset in tensors:
        raw = name.encode()
        out += struct.pack("<Q", len(raw)) + raw + struct.pack("<I", len(dims))
        out += struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", gtype, offset)
    return out + b"\0" * (-len(out) % 32) + data


F32 = 0


@pytest.mark.parametrize(
    ("tensors", "data_len", "n_tensors", "reason"),
    [
        ([("a", [4], F32, 0), ("b", [4], F32, 0)], 16, -1, "b [96, 112) overlaps a"),
        ([("w", [1 << 40], F32, 0)], 64, -1, "past the end of the file"),
        ([("w", [4], F32, 0)], 16, 1 << 60, "tensors in"),
        ([("w", [4], F32, 8)], 64, -1, "not aligned"),
        ([("w", [4], 99, 0)], 64, -1, None),
    ],
    ids=["overlap", "past-the-end", "lying-count", "unaligned", "unknown-type"],
)
def test_lying_gguf_headers_are_refused_without_torch(
    tmp_path: Path,
    tensors: list[tuple[str, list[int], int, int]],
    data_len: int,
    n_tensors: int,
    reason: str | None,
) -> None:
    p = tmp_path / "m.gguf"
    p.write_bytes(gguf_bytes(tensors, b"\0" * data_len, n_tensors))
    rec = scan_without(tmp_path, ("torch",), str(p)).by_path[str(p)]
    if reason is None:  # a type this scan does not know: named in a note, nothing to check
        assert "w: ggml type 99" in " ".join(rec["notes"]), rec
        return
    assert rec["status"] == "error" and reason in rec["error"], rec
    assert rec["format"] == "gguf"


def test_a_gguf_string_longer_than_the_file_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    p = tmp_path / "m.gguf"
    good = gguf_bytes([("weight", [4], F32, 0)], b"\0" * 16)
    p.write_bytes(good[:24] + struct.pack("<Q", 1 << 50) + good[32:])
    rec = scan_without(tmp_path, ("torch",), str(p)).by_path[str(p)]
    assert rec["status"] == "error" and "tensor info 0 needs" in rec["error"], rec


# ------------------------------------------------------------------------------ in-process

RAW_FLOATS = dict(zip(FLOATS, ["F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"]))


@settings(max_examples=80, deadline=None)
@given(
    dtype=st.sampled_from(FLOATS),
    n=st.integers(1, 300),
    chunk=st.integers(1, 70),
    sign=st.sampled_from(["mixed", "negative", "positive"]),
    nonneg=st.booleans(),
    seed=st.integers(0, 2**16),
    plants=st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from([math.nan, math.inf, -math.inf, -0.0])),
        max_size=4,
    ),
)
@pytest.mark.parametrize("path", PATHS)
def test_the_raw_checker_matches_torch_per_tensor(
    path: str,
    dtype: torch.dtype,
    n: int,
    chunk: int,
    sign: str,
    nonneg: bool,
    seed: int,
    plants: list[tuple[int, float]],
) -> None:
    """Per tensor and per chunk size: counts, first index and the largest finite magnitude
    (the records only hold a section's, which can hide one tensor's error) are torch's."""
    if path == "numpy":
        pytest.importorskip("numpy")
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 3
    x = {"negative": -x.abs(), "positive": x.abs(), "mixed": x}[sign]
    for i, v in plants:
        x[i % n] = v
    t = x.to(dtype)
    raw = t.contiguous().view(torch.uint8).numpy().tobytes()  # the bytes a file stores
    got = check_raw(raw, 0, DTYPES[RAW_FLOATS[dtype]], n, chunk, nonneg, None, path == "numpy")
    want = expected({"w": t}, {"w"} if nonneg else set())
    bad = want["bad"].get("w")
    assert (got.nan, got.posinf, got.neginf, got.negative) == (
        (bad["nan"], bad["posinf"], bad["neginf"], bad["negative"]) if bad else (0, 0, 0, 0)
    )
    assert got.first_bad == (bad["first_index"] if bad else None)
    assert got.max_abs == want["max_abs"]["weights"]


# ------------------------------------------------------------------------- inspect and diff


@pytest.mark.parametrize("path", PATHS)
def test_inspect_of_safetensors_needs_no_torch(tmp_path: Path, path: str) -> None:
    """inspect lists names, dtypes and shapes of a safetensors file with torch unimportable."""
    tensors = {
        "model.w": torch.zeros(3, 5, dtype=torch.bfloat16),
        "model.b": torch.zeros(5, dtype=torch.float16),
        "optimizer.state.0.step": torch.tensor(7, dtype=torch.int64),
    }
    p = tmp_path / "m.safetensors"
    cf.save_safetensors(tensors, p)
    r = without(tmp_path, blocked_for(path), "inspect", str(p))
    info = r.one("inspect")
    assert (info["ok"], info["format"], info["error"]) == (True, "safetensors", None), r.stderr
    got = {t["name"]: (t["dtype"], t["shape"]) for t in r.of("tensor")}
    assert got == {
        "model.w": ("bfloat16", [3, 5]),
        "model.b": ("float16", [5]),
        "optimizer.state.0.step": ("int64", []),
    }
    assert r.code == 0


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.double().reshape(-1)


def expected_diff(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    """rel_change, max_abs_diff and cosine over the values finite on both sides, by torch."""
    x, y = _flat(a), _flat(b)
    both = torch.isfinite(x) & torch.isfinite(y)
    x, y = x[both], y[both]
    d = y - x
    na, nb = float(x.norm()), float(y.norm())
    return {
        "rel_change": float(d.norm()) / na,
        "max_abs_diff": float(d.abs().max()),
        "cosine": float((x * y).sum()) / (na * nb),
    }


@pytest.mark.parametrize("path", PATHS)
def test_diff_of_safetensors_needs_no_torch_and_agrees_with_torch(
    tmp_path: Path, path: str
) -> None:
    """Two safetensors files of every real float dtype (chunks split unevenly), a counter and
    a second-moment slot: the per-tensor numbers are torch's, the flags name the NaN that
    appeared and the negative exp_avg_sq, with torch unimportable."""
    g = torch.Generator().manual_seed(11)
    a: dict[str, torch.Tensor] = {}
    for dtype in FLOATS:
        a[f"model.{str(dtype)[6:]}"] = (torch.randn(250, generator=g) * 3).to(dtype)
    a["optimizer.state.0.exp_avg_sq"] = torch.rand(100, generator=g)
    a["optimizer.state.0.step"] = torch.tensor(10, dtype=torch.int64)
    b = {k: v.clone() for k, v in a.items()}
    for k in list(b):
        if k.startswith("model."):
            b[k] = (a[k].double() + torch.randn(250, generator=g) * 0.1).to(a[k].dtype)
    b["model.float32"][17] = math.nan
    b["optimizer.state.0.exp_avg_sq"][3] = -1.0
    b["optimizer.state.0.step"] = torch.tensor(12, dtype=torch.int64)
    pa, pb = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    cf.save_safetensors(a, pa)
    cf.save_safetensors(b, pb)
    opts = '{"chunk_elems": 96, "top": 20}'
    r = without(tmp_path, blocked_for(path), "diff", str(pa), str(pb), "--options", opts)
    d = r.one("diff")
    assert d["error"] is None, (d, r.stderr)
    assert d["compared"] == len(FLOATS) + 1
    got = {t["name"]: t for t in d["top_weights"] + d["top_optimizer"]}
    for name in [k for k in a if k != "optimizer.state.0.step"]:
        want = expected_diff(a[name], b[name])
        for key, value in want.items():
            assert got[name][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (name, key)
    assert got["model.float32"]["new_nonfinite"] == 1
    flags = {(f["name"], f["kind"], f["count"]) for f in d["flags"]}
    assert flags == {
        ("model.float32", "new_nonfinite", 1),
        ("optimizer.state.0.exp_avg_sq", "negative_exp_avg_sq", 1),
    }
    step = d["counters"]["by_name"][0]
    assert (step["name"], step["changed"], step["delta_min"]) == ("step", 1, 2), d["counters"]
    assert r.code == 1


def test_inspect_and_diff_of_gguf_files_need_no_torch(tmp_path: Path) -> None:
    """Two GGUF files written by llama.cpp's own writer: inspect names the float tensors and
    the quantized one's note; diff compares the float tensors, torch unimportable."""
    gguf = pytest.importorskip("gguf", reason="the gguf package writes the real file")
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((16, 32)).astype(np.float32)
    b = a + np.float32(0.5)
    paths = []
    for name, w in (("a", a), ("b", b)):
        p = tmp_path / f"{name}.gguf"
        writer = gguf.GGUFWriter(str(p), "llama")
        writer.add_tensor("blk.0.attn_q.weight", w)
        writer.add_tensor("blk.0.ffn_up.weight", w[:4].astype(np.float16))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        paths.append(str(p))
    r = without(tmp_path, ("torch",), "inspect", paths[0])
    assert (r.one("inspect")["ok"], r.one("inspect")["format"]) == (True, "gguf"), r.stderr
    assert {t["name"]: (t["dtype"], t["shape"]) for t in r.of("tensor")} == {
        "blk.0.attn_q.weight": ("float32", [16, 32]),
        "blk.0.ffn_up.weight": ("float16", [4, 32]),
    }
    d = without(tmp_path, ("torch",), "diff", *paths).one("diff")
    assert (d["error"], d["compared"]) == (None, 2), d
    top = {t["name"]: t for t in d["top_weights"]}
    assert top["blk.0.attn_q.weight"]["max_abs_diff"] == pytest.approx(0.5, abs=1e-6)
