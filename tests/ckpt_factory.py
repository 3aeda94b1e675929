"""Real checkpoints for the checkpoint diagnostics tests, with faults planted at known places.

A plain module (not a fixture file) so that every test layer can use it: the script tests run
``remotekit/remote/ckpt.py`` on these files directly, the API tests go through the local
target, and the sshd -> fake pct -> venv tests go through the whole chain.

:func:`build_corpus` writes one directory holding every case and returns a :class:`Corpus`
whose ``expect`` maps each checkpoint path to the exact values a scan must report.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tests.harness import DATA

NAN, INF = float("nan"), float("inf")

__all__ = [
    "BN_FLOATS",
    "BN_PARAMS",
    "DEEPSPEED_DATA",
    "HF_TRAINER_DATA",
    "Corpus",
    "MaliciousPayload",
    "build_bisect_series",
    "build_corpus",
    "checkpoint_dict",
    "copy_deepspeed",
    "counters_only_pair",
    "deflate_zip",
    "hf_trainer_dir",
    "lfs_pointer",
    "lightning_run",
    "mismatches",
    "nanogpt_checkpoint",
    "plant",
    "plant_in_zip",
    "save_dcp",
    "save_safetensors",
    "storage_key_after",
    "train_bn",
    "train_tiny",
    "write_argv_recorder",
    "write_malicious",
    "write_safetensors_header",
    "write_worker_killer",
]


class TinyNet(torch.nn.Module):
    """fc1 (16x8 + 16), fc2 (4x16 + 4): 212 parameters in four tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


PARAMS = 16 * 8 + 16 + 4 * 16 + 4


def train_tiny(steps: int = 3, seed: int = 0) -> tuple[TinyNet, torch.optim.Adam]:
    """A TinyNet trained ``steps`` Adam steps; two param groups (lr 1e-3 for fc1, 5e-4 for fc2)."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = TinyNet()
    opt = torch.optim.Adam(
        [
            {"params": model.fc1.parameters(), "lr": 1e-3},
            {"params": model.fc2.parameters(), "lr": 5e-4},
        ]
    )
    for _ in range(steps):
        x = torch.randn(32, 8, generator=g)
        y = torch.randn(32, 4, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, opt


def checkpoint_dict(steps: int = 3, seed: int = 0, epoch: int = 0) -> dict[str, Any]:
    """The training-loop layout: model_state_dict, optimizer_state_dict, global_step, epoch."""
    model, opt = train_tiny(steps, seed)
    return {
        "model_state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "optimizer_state_dict": opt.state_dict(),
        "global_step": steps,
        "epoch": epoch,
        "loss": 0.5,
    }


def plant(t: torch.Tensor, flat_indices: list[int], value: float) -> None:
    """Write ``value`` at the given flat positions of ``t`` (in place)."""
    flat = t.view(-1)
    for i in flat_indices:
        flat[i] = value


class MaliciousPayload:
    """Unpickling this runs ``exec``, which writes ``marker``: a stand-in for real malware."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


class WorkerKiller:
    """Unpickling this ends the process at once (exit 3): a file that crashes the loader."""

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return (os._exit, (3,))


def write_worker_killer(path: Path) -> None:
    """A checkpoint whose unpickling (only with --unsafe-pickle) kills the process."""
    torch.save({"model_state_dict": {"w": torch.ones(2)}, "boom": WorkerKiller()}, path)


class ArgvRecorder:
    """Unpickling this writes the loading process's ``sys.argv`` (JSON) to ``marker``: which
    process read the file (a spawned ``ckpt.py _worker``, or a fork of the scan)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str, dict[str, Any]]]:
        code = (
            f"import json, sys\nwith open({self.marker!r}, 'w') as f:\n    json.dump(sys.argv, f)\n"
        )
        return (exec, (code, {}))


def write_argv_recorder(path: Path, marker: Path) -> None:
    """A checkpoint whose unpickling (only with --unsafe-pickle) records who loads it."""
    torch.save({"model_state_dict": {"w": torch.ones(2)}, "probe": ArgvRecorder(marker)}, path)


def write_malicious(path: Path, marker: Path) -> None:
    """A torch.save'd dict of real weights plus an object whose unpickling writes ``marker``."""
    ckpt = checkpoint_dict()
    torch.save(
        {"model_state_dict": ckpt["model_state_dict"], "payload": MaliciousPayload(str(marker))},
        path,
    )


def save_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write ``tensors`` with the safetensors package itself.

    safetensors >= 0.7 has a numpy-free writer (``TensorSpec`` + ``serialize_file``); older
    releases go through ``safetensors.torch.save_file``, which needs numpy.
    """
    try:
        from safetensors import TensorSpec, serialize_file
    except ImportError:
        from safetensors.torch import save_file

        save_file(tensors, str(path))
        return
    alive = {k: v.contiguous() for k, v in tensors.items()}
    specs = {
        k: TensorSpec(
            dtype=str(v.dtype).replace("torch.", ""),
            shape=list(v.shape),
            data_ptr=v.data_ptr(),
            data_len=v.numel() * v.element_size(),
        )
        for k, v in alive.items()
    }
    serialize_file(specs, str(path))


@dataclass
class Corpus:
    """What :func:`build_corpus` made: ``expect[path]`` holds the exact values a scan reports."""

    root: Path
    expect: dict[str, dict[str, Any]] = field(default_factory=dict)
    clean: Path = Path()
    unsafe: Path = Path()
    skipped: list[str] = field(default_factory=list)

    def add(self, path: Path, **values: Any) -> Path:
        self.expect[str(path)] = values
        return path


def _zero_counts(**over: Any) -> dict[str, Any]:
    base = {
        "nan_weights": 0,
        "posinf_weights": 0,
        "neginf_weights": 0,
        "nan_optimizer": 0,
        "posinf_optimizer": 0,
        "neginf_optimizer": 0,
        "negative_exp_avg_sq": 0,
    }
    base.update(over)
    return base


def build_corpus(root: Path) -> Corpus:
    """Write every case under ``root`` (a few hundred KB in all); see :class:`Corpus`."""
    root.mkdir(parents=True, exist_ok=True)
    c = Corpus(root=root)

    def ckdir(name: str) -> Path:
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    # A clean training checkpoint.
    clean = checkpoint_dict(steps=3)
    c.clean = ckdir("clean") / "checkpoint.pt"
    torch.save(clean, c.clean)
    c.add(
        c.clean,
        status="clean",
        format="torch",
        global_step=3,
        epoch=0,
        params=PARAMS,
        tensors=4 + 4 * 3,
        bad=[],
        **_zero_counts(),
    )

    # NaN / +Inf / -Inf in weights.
    ck = checkpoint_dict(steps=4)
    sd = ck["model_state_dict"]
    plant(sd["fc1.weight"], [3, 17], NAN)
    plant(sd["fc2.bias"], [1], INF)
    plant(sd["fc1.bias"], [0, 7], -INF)
    p = ckdir("nan_weights") / "checkpoint.pt"
    torch.save(ck, p)
    c.add(
        p,
        status="bad",
        format="torch",
        global_step=4,
        params=PARAMS,
        bad=[
            ("model_state_dict.fc1.weight", "weights", 2, 0, 0, 3),
            ("model_state_dict.fc1.bias", "weights", 0, 0, 2, 0),
            ("model_state_dict.fc2.bias", "weights", 0, 1, 0, 1),
        ],
        **_zero_counts(nan_weights=2, posinf_weights=1, neginf_weights=2),
    )

    # Non-finite and negative values in Adam state.
    ck = checkpoint_dict(steps=5)
    st = ck["optimizer_state_dict"]["state"]
    plant(st[0]["exp_avg_sq"], [0, 10, 20], INF)
    plant(st[0]["exp_avg_sq"], [5], NAN)
    plant(st[2]["exp_avg"], [1], -INF)
    plant(st[1]["exp_avg_sq"], [2], -1.0)
    p = ckdir("inf_optimizer") / "checkpoint.pt"
    torch.save(ck, p)
    c.add(
        p,
        status="bad",
        format="torch",
        global_step=5,
        bad=[
            ("optimizer_state_dict.state.0.exp_avg_sq", "optimizer", 1, 3, 0, 0),
            ("optimizer_state_dict.state.1.exp_avg_sq", "optimizer", 0, 0, 0, 2),
            ("optimizer_state_dict.state.2.exp_avg", "optimizer", 0, 0, 1, 1),
        ],
        **_zero_counts(
            nan_optimizer=1, posinf_optimizer=3, neginf_optimizer=1, negative_exp_avg_sq=1
        ),
    )

    # Low-precision, complex, integer and bool tensors.
    bf = torch.randn(64).to(torch.bfloat16)
    plant(bf, [9], NAN)
    f16 = torch.randn(32).to(torch.float16)
    plant(f16, [31], -INF)
    e4 = torch.randn(40).to(torch.float8_e4m3fn)
    e4.view(torch.uint8)[[4, 39]] = 0x7F  # the e4m3fn NaN encoding (it has no Inf)
    e5 = torch.randn(24).to(torch.float8_e5m2)
    e5.view(torch.uint8)[7] = 0x7C  # +Inf in e5m2
    cx = torch.randn(10, dtype=torch.complex64)
    cx[3] = complex(1.0, NAN)
    mixed = {
        "bf16.weight": bf,
        "half.weight": f16,
        "f8e4m3.weight": e4,
        "f8e5m2.weight": e5,
        "complex.weight": cx,
        "steps": torch.arange(5),
        "mask": torch.ones(3, dtype=torch.bool),
    }
    p = ckdir("mixed_dtypes") / "checkpoint.pt"
    torch.save(mixed, p)
    c.add(
        p,
        status="bad",
        tensors=7,
        skipped_tensors=2,
        params=64 + 32 + 40 + 24 + 10,
        bad=[
            ("bf16.weight", "weights", 1, 0, 0, 9),
            ("half.weight", "weights", 0, 0, 1, 31),
            ("f8e4m3.weight", "weights", 2, 0, 0, 4),
            ("f8e5m2.weight", "weights", 0, 1, 0, 7),
            ("complex.weight", "weights", 1, 0, 0, 3),
        ],
        **_zero_counts(nan_weights=4, posinf_weights=1, neginf_weights=1),
    )

    # Tied weights: one storage under two keys, one NaN in it.
    emb = torch.randn(50, 8)
    plant(emb, [13], NAN)
    tied = {"embed.weight": emb, "lm_head.weight": emb, "norm.weight": torch.ones(8)}
    p = ckdir("tied") / "checkpoint.pt"
    torch.save(tied, p)
    c.add(
        p,
        status="bad",
        tensors=3,
        params=50 * 8 + 8,
        bad=[("embed.weight", "weights", 1, 0, 0, 13), ("lm_head.weight", "weights", 1, 0, 0, 13)],
        shared={"embed.weight": ["lm_head.weight"], "lm_head.weight": ["embed.weight"]},
        **_zero_counts(nan_weights=1),
    )

    # DDP-style "module." prefixes in a bare state dict.
    p = ckdir("ddp") / "checkpoint.pt"
    torch.save({"module." + k: v for k, v in clean["model_state_dict"].items()}, p)
    c.add(p, status="clean", tensors=4, params=PARAMS, bad=[], **_zero_counts())

    # Nested dicts and lists.
    a = checkpoint_dict(steps=1, seed=1)["model_state_dict"]
    b = checkpoint_dict(steps=1, seed=2)["model_state_dict"]
    plant(b["fc2.weight"], [63], NAN)
    p = ckdir("nested") / "checkpoint.pt"
    torch.save(
        {"models": [a, b], "extra": {"ema": {"decay": 0.999, "shadow": [a["fc1.bias"] * 1]}}}, p
    )
    c.add(
        p,
        status="bad",
        tensors=9,
        params=2 * PARAMS + 16,
        bad=[("models.1.fc2.weight", "weights", 1, 0, 0, 63)],
        **_zero_counts(nan_weights=1),
    )

    # Legacy (non-zip) torch.save: no mmap, same answers.
    p = ckdir("legacy") / "checkpoint.pt"
    torch.save(clean, p, _use_new_zipfile_serialization=False)
    c.add(
        p,
        status="clean",
        format="torch-legacy",
        global_step=3,
        params=PARAMS,
        bad=[],
        **_zero_counts(),
    )

    # A safetensors file written by the safetensors package.
    w = torch.randn(6, 5)
    plant(w, [0, 29], INF)
    st_tensors = {
        "encoder.weight": w,
        "encoder.bias": torch.randn(5).to(torch.bfloat16),
        "head.weight": torch.randn(3, 5).to(torch.float16),
        "ids": torch.arange(4),
    }
    p = ckdir("safetensors") / "model.safetensors"
    save_safetensors(st_tensors, p)
    c.add(
        p,
        status="bad",
        format="safetensors",
        tensors=4,
        skipped_tensors=1,
        params=30 + 5 + 15,
        bad=[("encoder.weight", "weights", 0, 2, 0, 0)],
        **_zero_counts(posinf_weights=2),
    )

    # A 2-shard HF checkpoint with its index and trainer_state.json.
    hf = ckdir("hf")
    s1 = {"layers.0.weight": torch.randn(4, 4), "layers.0.bias": torch.randn(4)}
    s2 = {"layers.1.weight": torch.randn(4, 4), "layers.1.bias": torch.randn(4)}
    plant(s2["layers.1.weight"], [6], NAN)
    save_safetensors(s1, hf / "model-00001-of-00002.safetensors")
    save_safetensors(s2, hf / "model-00002-of-00002.safetensors")
    wmap = {k: "model-00001-of-00002.safetensors" for k in s1}
    wmap.update({k: "model-00002-of-00002.safetensors" for k in s2})
    (hf / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 160}, "weight_map": wmap})
    )
    (hf / "trainer_state.json").write_text(json.dumps({"global_step": 50, "epoch": 1.0}))
    for aux in ("training_args.bin", "rng_state.pth"):
        (hf / aux).write_bytes(b"not scanned")
        c.skipped.append(str(hf / aux))
    c.add(  # a directory with trainer_state.json: one HF Trainer checkpoint (save_only_model)
        hf,
        status="bad",
        format="hf-trainer",
        global_step=50,
        epoch=1,
        tensors=4,
        params=40,
        bad=[("layers.1.weight", "weights", 1, 0, 0, 6)],
        **_zero_counts(nan_weights=1),
    )

    # Files that cannot be read, each for its own reason.
    bad = ckdir("bad")
    raw = c.clean.read_bytes()
    c.add(_put(bad / "truncated.pt", raw[: len(raw) // 2]), status="error", error="truncated")
    c.add(_put(bad / "empty.pt", b""), status="error", error="empty file")
    c.add(
        _put(bad / "notazip.pt", b"hello, I am a text file\n" * 4),
        status="error",
        error="not a checkpoint",
    )
    (bad / "dir.pt").mkdir(exist_ok=True)
    c.add(bad / "dir.pt", status="error", error="is a directory")
    torch.save({"foo": 1, "bar": "baz"}, bad / "nokeys.pt")
    c.add(bad / "nokeys.pt", status="error", error="holds no tensors")
    st_raw = (root / "safetensors" / "model.safetensors").read_bytes()
    c.add(_put(bad / "cut.safetensors", st_raw[:-40]), status="error", error="truncated")
    os.symlink(bad / "gone.pt", bad / "dangling.pt")
    c.add(bad / "dangling.pt", status="error", error="dangling symlink")

    # Checkpoint directories whose files are damaged: one record each, "error".
    dcp = ckdir("broken_layouts/dcp_step100")
    (dcp / ".metadata").write_bytes(b"\x80\x04N.")
    (dcp / "__0_0.distcp").write_bytes(b"\0" * 16)
    c.add(dcp, status="error", format="dcp", error="cannot read the DCP .metadata")
    zero = ckdir("broken_layouts/global_step7")
    (zero / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"\0" * 16)
    (zero / "zero_pp_rank_1_mp_rank_00_optim_states.pt").write_bytes(b"\0" * 16)
    c.add(zero, status="error", format="deepspeed", error="zero_pp_rank_0_mp_rank_00_optim_states")

    # Needs a global that weights_only does not allow by default.
    ck = checkpoint_dict(steps=3)
    ck["args"] = argparse.Namespace(lr=1e-3, batch_size=32)
    c.unsafe = ckdir("unsafe_global") / "checkpoint.pt"
    torch.save(ck, c.unsafe)
    c.add(
        c.unsafe, status="error", error="argparse.Namespace", needs_globals=["argparse.Namespace"]
    )
    return c


def mismatches(expect: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """How a scan's checkpoint record (or ``to_jsonable(CheckpointReport)``) differs from
    ``expect``; empty when it matches. ``bad`` compares (name, section, nan, posinf, neginf,
    first_index) per bad tensor in order; ``error`` is a substring; ``shared`` maps names to
    their ``shared_with``; every other key must be equal."""
    out = []
    for key, want in expect.items():
        if key == "bad":
            have = [
                (b["name"], b["section"], b["nan"], b["posinf"], b["neginf"], b["first_index"])
                for b in got.get("bad_tensors") or ()
            ]
            if have != list(want):
                out.append(f"bad tensors: {have} != {want}")
        elif key == "error":
            if want not in (got.get("error") or ""):
                out.append(f"error {got.get('error')!r} lacks {want!r}")
        elif key == "shared":
            have_shared = {b["name"]: list(b["shared_with"]) for b in got.get("bad_tensors") or ()}
            if have_shared != want:
                out.append(f"shared_with: {have_shared} != {want}")
        else:
            have_value = got.get(key)
            if isinstance(want, list):
                have_value = list(have_value or [])
            if have_value != want:
                out.append(f"{key}: {have_value!r} != {want!r}")
    return out


def _put(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def build_bisect_series(
    root: Path, steps: list[int], bad_steps: set[int], names: list[str], *, with_step: bool = True
) -> list[Path]:
    """One ``<name>/checkpoint.pt`` per step; those in ``bad_steps`` get a NaN in fc2.weight[5].
    ``with_step=False`` leaves ``global_step`` out (bisect then orders by name)."""
    out = []
    for step, name in zip(steps, names):
        ck = checkpoint_dict(steps=1, seed=step)
        ck["global_step"] = step
        if not with_step:
            del ck["global_step"]
        if step in bad_steps:
            plant(ck["model_state_dict"]["fc2.weight"], [5], NAN)
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        torch.save(ck, d / "checkpoint.pt")
        out.append(d / "checkpoint.pt")
    return out


# ------------------------------------------------------------------ layouts of real trainers

DEEPSPEED_DATA = DATA / "deepspeed"
HF_TRAINER_DATA = DATA / "hf_trainer"


def nanogpt_checkpoint(path: Path, iter_num: int = 2000, best_val_loss: float = 2.875) -> None:
    """nanoGPT's train.py layout (karpathy/nanoGPT 3adf61e, train.py lines 277-286: the dict
    saved as ckpt.pt): model, optimizer, model_args (lines 147-148), iter_num, best_val_loss
    (a 0-d tensor: ``losses['val']``, which ``estimate_loss`` makes with ``losses.mean()``,
    line 226), config. The optimizer is Adam(W): one 0-d float ``step`` per parameter."""
    model, opt = train_tiny(3)
    model_args = dict(n_layer=2, n_head=2, n_embd=16, block_size=64, bias=False, dropout=0.0)
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "model_args": dict(model_args, vocab_size=50304),
            "iter_num": iter_num,
            "best_val_loss": torch.tensor(best_val_loss),
            "config": {"learning_rate": 6e-4, "max_iters": 600000, "dataset": "openwebtext"},
        },
        path,
    )


def hf_trainer_dir(
    root: Path, step: int, *, nan_optimizer: int | None = None, sharded: bool = False
) -> Path:
    """``checkpoint-N/`` as transformers' Trainer._save_checkpoint writes it: the weights
    (model.safetensors, or shards + model.safetensors.index.json), optimizer.pt (the optimizer's
    state_dict), scheduler.pt, rng_state.pth, training_args.bin and trainer_state.json. Written
    here with torch + safetensors to that documented layout (transformers is not a dependency).
    ``nan_optimizer`` plants a NaN at that flat index of the first exp_avg_sq."""
    d = root / f"checkpoint-{step}"
    d.mkdir(parents=True)
    model, opt = train_tiny(3, seed=step)
    weights = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if sharded:
        names = sorted(weights)
        half = len(names) // 2
        parts = {"model-00001-of-00002.safetensors": names[:half]}
        parts["model-00002-of-00002.safetensors"] = names[half:]
        wmap = {}
        for fname, keys in parts.items():
            save_safetensors({k: weights[k] for k in keys}, d / fname)
            wmap.update({k: fname for k in keys})
        (d / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 848}, "weight_map": wmap})
        )
    else:
        save_safetensors(weights, d / "model.safetensors")
    osd = opt.state_dict()
    if nan_optimizer is not None:
        plant(osd["state"][0]["exp_avg_sq"], [nan_optimizer], NAN)
    torch.save(osd, d / "optimizer.pt")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    torch.save(sched.state_dict(), d / "scheduler.pt")
    torch.save({"python": [3], "cpu": torch.get_rng_state()}, d / "rng_state.pth")
    torch.save({"output_dir": str(root)}, d / "training_args.bin")
    state = {
        "global_step": step,
        "epoch": step / 100,
        "log_history": [{"loss": 2.5, "step": step}],
        "save_steps": 100,
    }
    (d / "trainer_state.json").write_text(json.dumps(state))
    return d


def save_dcp(
    path: Path, step: int, *, nan_weight: int | None = None, inf_optim: bool = False
) -> None:
    """A torch.distributed.checkpoint directory written by the real ``dcp.save`` (one process,
    no process group), torchtitan-shaped: model, optimizer, train_state.step."""
    import warnings

    import torch.distributed.checkpoint as dcp

    model, opt = train_tiny(3, seed=step)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if nan_weight is not None:
        plant(sd["fc1.weight"], [nan_weight], NAN)
    osd = opt.state_dict()
    if inf_optim:
        plant(osd["state"][1]["exp_avg"], [0], INF)
    state = {"model": sd, "optimizer": osd, "train_state": {"step": torch.tensor(step)}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state, checkpoint_id=str(path))


def copy_deepspeed(variant: str, dest: Path) -> Path:
    """A copy of a real DeepSpeed checkpoint (tests/data/deepspeed/VARIANT: ``latest`` and
    ``global_step2/``); returns the global_step2 directory."""
    import shutil

    shutil.copytree(DEEPSPEED_DATA / variant, dest)
    return dest / "global_step2"


def plant_in_zip(
    path: Path, storage_key: str, flat_index: int, value: float, dtype: torch.dtype
) -> None:
    """Overwrite one value of a stored tensor inside a torch.save zip, in place: the rest of
    the file (its pickle, its library objects) stays byte for byte as its writer made it."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith("/data/" + storage_key))
    with open(path, "r+b") as f:
        f.seek(info.header_offset)
        head = f.read(30)
        n, e = struct.unpack("<HH", head[26:30])
        size = torch.empty((), dtype=dtype).element_size()
        f.seek(info.header_offset + 30 + n + e + flat_index * size)
        f.write(bytes(torch.tensor([value], dtype=dtype).view(torch.uint8).tolist()))


def storage_key_after(path: Path, name: str) -> str:
    """The zip storage key of the first tensor pickled after the string ``name`` in a
    torch.save file (read from the pickle's opcodes; nothing is unpickled)."""
    import pickletools
    import zipfile

    with zipfile.ZipFile(path) as zf:
        pkl = zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))
    ops = list(pickletools.genops(pkl))
    start = next(i for i, (_, arg, _) in enumerate(ops) if arg == name)
    # A tensor's storage is a persistent id ('storage', Type, KEY, 'cpu', numel): KEY is the
    # last digit string before the next BINPERSID (the other strings may be memo references).
    for i in range(start, len(ops)):
        if ops[i][0].name == "BINPERSID":
            for _, arg, _ in reversed(ops[start:i]):
                if isinstance(arg, str) and arg.isdigit():
                    return arg
    raise AssertionError(f"no tensor after {name!r} in {path}")


def lfs_pointer(path: Path, size: int = 1_342_177_280) -> Path:
    """What a clone without ``git lfs pull`` has in place of a large file."""
    path.write_text(
        "version https://git-lfs.github.com/spec/v1\n"
        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
        f"size {size}\n"
    )
    return path


def deflate_zip(src: Path, dest: Path) -> Path:
    """``src`` (a torch.save zip) repacked with every entry deflated, as `zip -r` would."""
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info), compress_type=zipfile.ZIP_DEFLATED)
    return dest


def write_safetensors_header(path: Path, header: dict[str, Any], data_len: int) -> Path:
    """A safetensors file with exactly this header (however wrong) and ``data_len`` zero bytes."""
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * data_len)
    return path


# ------------------------------------------------------------------ non-weights in a checkpoint


class BnNet(torch.nn.Module):
    """Linear 8->16, BatchNorm1d(16), Linear 16->4: 276 floating values (six parameters and
    BatchNorm's running_mean / running_var) and BatchNorm's int64 ``num_batches_tracked``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


BN_FLOATS = 16 * 8 + 16 + 4 * 16 + 4 * 16 + 4  # fc1, bn (4 x 16), fc2
BN_PARAMS = 16 * 8 + 16 + 2 * 16 + 4 * 16 + 4  # what Adam keeps moments of


def train_bn(steps: int) -> tuple[BnNet, torch.optim.Adam]:
    """A BnNet trained ``steps`` Adam steps: ``num_batches_tracked`` == ``steps``, and each of
    Adam's six per-parameter ``step`` counters (0-d float32 tensors since torch 2.0) too."""
    g = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    model = BnNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(
            model(torch.randn(16, 8, generator=g)), torch.randn(16, 4, generator=g)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, opt


def counters_only_pair(root: Path, steps: int = 200) -> tuple[Path, Path]:
    """Two torch.save'd checkpoints of one BnNet: B is A with ``num_batches_tracked`` and
    Adam's step counters doubled, every float value the same."""
    model, opt = train_bn(steps)
    a = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": steps}
    root.mkdir(parents=True, exist_ok=True)
    torch.save(a, root / "a.pt")
    model.bn.num_batches_tracked.mul_(2)
    for state in opt.state.values():
        state["step"].mul_(2)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, root / "b.pt")
    return root / "a.pt", root / "b.pt"


def lightning_run(root: Path, epochs: int = 2) -> list[Path]:
    """``epochs`` checkpoints written by a real Lightning Trainer (CPU) of a LightningModule
    around BnNet, with ``ModelCheckpoint(monitor="val_loss", save_top_k=3)``: each ``.ckpt``
    holds the callback's state (``best_model_score``, ``current_score``, ``best_k_models``,
    and ``kth_value``, which stays +inf while fewer than 3 are kept), the loops' progress
    counters, ``optimizer_states`` and ``state_dict``. Sorted by epoch."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = BnNet()

        def training_step(self, batch: Any, _: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, _: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(64, 8, generator=g), torch.randn(64, 4, generator=g)
    )
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    L.seed_everything(0, verbose=False)
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            ModelCheckpoint(
                dirpath=str(root), monitor="val_loss", save_top_k=3, filename="{epoch}-{step}"
            )
        ],
    )
    trainer.fit(Module(), loader, loader)
    return sorted(root.glob("*.ckpt"), key=lambda p: p.name)


# ------------------------------------------------------------------ zip archives of torch files


def sb3_available() -> bool:
    """stable-baselines3 is importable here (it is no dependency of the tests)."""
    import importlib.util

    return importlib.util.find_spec("stable_baselines3") is not None


def sb3_real_save(path: Path, timesteps: int = 128) -> Path:
    """A PPO on CartPole-v1 trained ``timesteps`` steps and saved by stable-baselines3's own
    ``model.save`` (only where it is installed: :func:`sb3_available`)."""
    from stable_baselines3 import PPO

    model = PPO(
        "MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=2, seed=0, device="cpu"
    )
    model.learn(timesteps)
    model.save(str(path))
    return path if str(path).endswith(".zip") else Path(str(path) + ".zip")


def sb3_layout_save(
    path: Path,
    num_timesteps: int = 128,
    *,
    drop_state: int = 0,
    nan_weight: bool = False,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """A zip in the layout of stable-baselines3's ``save_to_zip_file`` (save_util.py, 2.x):
    ``data`` (JSON: counters, and cloudpickled values as ``{":type:", ":serialized:"}``
    text), ``pytorch_variables.pth``, ``policy.pth`` and ``policy.optimizer.pth``, each
    written by torch.save into a stored member opened with ``force_zip64``, and
    ``_stable_baselines3_version``. Written with torch + zipfile (stable-baselines3 is no
    dependency). ``drop_state``: that many parameters' optimizer state left out (the last
    ones); ``nan_weight``: a NaN in the first weight; ``extra``: more members, as given."""
    import zipfile

    model, opt = train_tiny(3)
    sd = {f"mlp_extractor.{k}": v.detach().clone() for k, v in model.state_dict().items()}
    if nan_weight:
        plant(next(iter(sd.values())), [0], NAN)
    osd = opt.state_dict()
    for i in sorted(osd["state"])[len(osd["state"]) - drop_state :]:
        del osd["state"][i]
    data = {
        "policy_class": {":type:": "<class 'abc.ABCMeta'>", ":serialized:": "gAWVOwAAAAAAAACM"},
        "num_timesteps": num_timesteps,
        "_total_timesteps": num_timesteps,
        "_n_updates": 4,
        "n_envs": 1,
        "learning_rate": 0.0003,
        "_last_obs": {":type:": "<class 'numpy.ndarray'>", ":serialized:": "gAWVlQAAAAAAAACM"},
    }
    with zipfile.ZipFile(path, mode="w") as archive:
        archive.writestr("data", json.dumps(data, indent=4))
        for name, obj in (("pytorch_variables", {}), ("policy", sd), ("policy.optimizer", osd)):
            with archive.open(name + ".pth", mode="w", force_zip64=True) as f:
                torch.save(obj, f)
        archive.writestr("_stable_baselines3_version", "2.3.2")
        for name, raw in (extra or {}).items():
            archive.writestr(name, raw)
    return path
