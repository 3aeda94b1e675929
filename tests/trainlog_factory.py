"""Training logs for the train-log tests, made by a real (tiny) torch training loop.

The task: classify a token sequence by its first token (8 classes). Sequences come in three
length buckets (1: 8 tokens, 3: 32, 5: 96 tokens; shares 18%, 30%, 52%) whose labels are
noisy to different degrees, so each bucket settles at its own loss. The batch order is the
variable under test:

- ``homogeneous``: every batch holds one bucket, drawn at random per step (bucketed
  shuffling): the batch loss follows the bucket (a trimodal loss), with runs of the same
  bucket up to ~10 steps;
- ``strided``: batches still hold one bucket, but buckets are interleaved in proportion
  (the story's fix): trimodal, yet no bucket runs for long;
- ``mixed``: every batch mixes all buckets (padded): one loss level, unimodal;
- ``cycled``: one bucket for 20 steps, then the next (length-grouped, sorted): a sawtooth
  that repeats every 60 steps.

``spikes`` planted at given steps add large noise to the weights just before that step's
forward pass (a real blow-up the optimizer then recovers from). Writers turn the rows into
each input format the analysis reads. Plain module (no pytest fixtures here).
"""

from __future__ import annotations

import csv
import functools
import json
import math
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

Row = dict[str, Any]

BUCKETS = {1: 8, 3: 32, 5: 96}  # bucket id -> sequence length
SHARES = {1: 0.18, 3: 0.30, 5: 0.52}
NOISE = {1: 0.25, 3: 0.10, 5: 0.02}  # label noise per bucket: loss ~0.95 / 0.47 / 0.12
VOCAB, CLASSES, DIM, BATCH = 64, 8, 16, 64


def _bucket_order(order: str, steps: int, rng: random.Random) -> list[int | None]:
    ids = list(BUCKETS)
    if order == "mixed":
        return [None] * steps
    if order == "homogeneous":
        return rng.choices(ids, weights=[SHARES[b] for b in ids], k=steps)
    if order == "strided":
        counts = dict.fromkeys(ids, 0)
        out = []
        for t in range(steps):
            b = max(ids, key=lambda i: SHARES[i] * (t + 1) - counts[i])
            counts[b] += 1
            out.append(b)
        return out
    if order == "cycled":
        return [ids[(t // 20) % len(ids)] for t in range(steps)]
    raise ValueError(f"unknown order {order!r}")


def train(
    order: str = "homogeneous",
    steps: int = 600,
    *,
    seed: int = 0,
    spikes: Sequence[int] = (),
    warmup: int = 0,
    lr: float = 0.02,
    spike_scale: float = 1.3,
) -> list[Row]:
    """Run the loop; one row per step: step, loss, acc, lr, grad_norm, epoch, seq_len,
    tokens, and bucket (except for ``mixed`` batches, which have no single bucket)."""
    import torch

    torch.set_num_threads(1)  # a tiny model: more threads only fight over shared cores
    torch.manual_seed(seed)
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    emb = torch.nn.Embedding(VOCAB, DIM)
    head = torch.nn.Linear(DIM, CLASSES)
    params = [*emb.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=lr)
    order_ = _bucket_order(order, steps, rng)
    spike_at = set(spikes)
    rows: list[Row] = []
    for step, bucket in enumerate(order_):
        if bucket is None:
            picks = rng.choices(list(BUCKETS), weights=list(SHARES.values()), k=BATCH)
        else:
            picks = [bucket] * BATCH
        length = max(BUCKETS[b] for b in picks)
        x = torch.zeros(BATCH, length, dtype=torch.long)
        mask = torch.zeros(BATCH, length)
        for i, b in enumerate(picks):
            ln = BUCKETS[b]
            x[i, :ln] = torch.randint(1, VOCAB, (ln,), generator=gen)
            mask[i, :ln] = 1.0
        y = x[:, 0] % CLASSES
        # a fixed share of wrong labels per bucket and batch: a steady loss level per bucket,
        # as a token-averaged LM loss has (a random count would make it jumpy)
        for b in set(picks):
            where = [i for i, p in enumerate(picks) if p == b]
            for i in rng.sample(where, round(NOISE[b] * len(where))):
                y[i] = (y[i] + rng.randrange(1, CLASSES)) % CLASSES
        if step in spike_at:
            # confidently wrong: tokens swap embeddings (sharper, too), then the run relearns
            with torch.no_grad():
                perm = torch.randperm(VOCAB, generator=gen)
                emb.weight.copy_(emb.weight[perm] * spike_scale)
        rate = lr * min(1.0, (step + 1) / warmup) if warmup else lr
        for g in opt.param_groups:
            g["lr"] = rate
        e = emb(x)
        pooled = (e * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        logits = head(e[:, 0] + 0.1 * pooled)
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1e9)
        opt.step()
        row: Row = {
            "step": step,
            "loss": round(loss.item(), 5),
            "acc": round((logits.argmax(1) == y).float().mean().item(), 5),
            "lr": rate,
            "grad_norm": round(grad_norm.item(), 5),
            "epoch": round(step / 150, 4),
            "seq_len": length,
            "tokens": int(mask.sum().item()),
        }
        if bucket is not None:
            row["bucket"] = bucket
        rows.append(row)
    return rows


@functools.cache
def cached(
    order: str, steps: int = 600, spikes: tuple[int, ...] = (), warmup: int = 0
) -> tuple[Row, ...]:
    """:func:`train`, once per argument set and test session (both test modules share it)."""
    return tuple(train(order, steps, spikes=spikes, warmup=warmup))


# ---------------------------------------------------------------------------------------------
# writers: one per input format


def _fmt(v: Any) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def write_jsonl(
    rows: Iterable[Row],
    path: Path,
    *,
    checkpoints: Sequence[int] = (),
    wandb: bool = False,
    pause_at: int | None = None,
) -> Path:
    """JSON lines; ``checkpoints`` add text lines 'Saving checkpoint at step N' after that
    step (a training script's stdout). ``wandb``: W&B history keys (``_step``,
    ``train/loss`` ...) and no plain ``step``, with ``_timestamp`` 0.5 s apart (an hour
    apart before ``pause_at``)."""
    ck = set(checkpoints)
    with open(path, "w") as f:
        for r in rows:
            if wandb:
                gap = 3600.0 if pause_at is not None and r["step"] >= pause_at else 0.0
                out = {"_step": r["step"], "_timestamp": 1.7e9 + r["step"] * 0.5 + gap}
                out.update({f"train/{k}": v for k, v in r.items() if k != "step"})
                out["train/global_step"] = r["step"]
            else:
                out = r
            f.write(json.dumps(out) + "\n")
            if r["step"] in ck:
                f.write(f"Saving checkpoint at step {r['step']} to /ckpt/step_{r['step']}\n")
    return path


def write_csv(rows: Sequence[Row], path: Path) -> Path:
    keys = list(rows[0])
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return path


def write_trainer_state(rows: Sequence[Row], path: Path, *, save_steps: int = 200) -> Path:
    """HF ``trainer_state.json``: train rows as the Trainer logs them, plus eval rows."""
    hist: list[Row] = []
    for r in rows:
        hist.append(
            {
                "epoch": r["epoch"],
                "grad_norm": r["grad_norm"],
                "learning_rate": r["lr"],
                "loss": r["loss"],
                "step": r["step"],
            }
        )
        if r["step"] and r["step"] % 100 == 0:
            hist.append({"epoch": r["epoch"], "eval_loss": r["loss"] * 1.1, "step": r["step"]})
    state = {
        "best_metric": None,
        "epoch": rows[-1]["epoch"],
        "global_step": rows[-1]["step"],
        "log_history": hist,
        "logging_steps": 1,
        "max_steps": len(rows),
        "save_steps": save_steps,
    }
    path.write_text(json.dumps(state, indent=2))
    return path


def write_text(
    rows: Iterable[Row], path: Path, *, style: str = "kv", checkpoints: Sequence[int] = ()
) -> Path:
    """Plain text: ``kv`` gives 'step=12 loss=0.7 acc=0.5 ...', ``colon`` gives
    '[2024-05-01 12:00:01] Step 12 | loss: 0.7 | acc: 0.5 ...'."""
    ck = set(checkpoints)
    with open(path, "w") as f:
        f.write("INFO starting training run (bucketed batches)\n")
        for r in rows:
            s = r["step"]
            if style == "kv":
                f.write(" ".join(f"{k}={_fmt(v)}" for k, v in r.items()) + "\n")
            else:
                ts = f"2024-05-01 12:{s // 60 % 60:02d}:{s % 60:02d}"
                rest = " | ".join(f"{k}: {_fmt(v)}" for k, v in r.items() if k != "step")
                f.write(f"[{ts}] Step {s} | {rest}\n")
            if s in ck:
                f.write(f"INFO saved checkpoint to /workspace/checkpoints/checkpoint-{s}\n")
    return path


def nan_at(rows: Sequence[Row], steps: Iterable[int]) -> list[Row]:
    """A copy where the loss is NaN at ``steps`` (a diverged step as it gets logged)."""
    bad = set(steps)
    return [{**r, "loss": math.nan} if r["step"] in bad else r for r in rows]


def resumed(rows: Sequence[Row], at: int, back_to: int) -> list[Row]:
    """A log where the run was resumed at ``at`` from the checkpoint of ``back_to``: the
    steps ``back_to .. at-1`` appear twice."""
    head = [r for r in rows if r["step"] < at]
    again = [r for r in rows if back_to <= r["step"] < at]
    tail = [r for r in rows if r["step"] >= at]
    return head + again + tail
