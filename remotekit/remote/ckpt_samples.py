#!/usr/bin/env python3
"""Make sample checkpoints for the checkpoint-scan demo, run *there*.

Standalone: the standard library and torch >= 2.1 only, Python >= 3.8. Usage::

    ckpt_samples.py DIRECTORY [--steps 5]

Writes ``DIRECTORY/<name>/checkpoint.pt`` (the layout of a training run's checkpoints; only
these five sub-directories are written, nothing else in DIRECTORY is touched):

    clean          a small MLP trained a few steps with Adam
    nan_weights    the same, with NaN planted in model weights
    inf_optimizer  the same, with +Inf planted in Adam's exp_avg_sq
    truncated      the clean file cut in half (an interrupted save)
    unsafe_global  a clean checkpoint that also pickles an argparse.Namespace, which
                   ``weights_only`` loading refuses unless it is allow-listed

Output: one JSON object per stdout line: a ``sample`` record per file
``{name, path, expect, detail, planted}`` (``expect`` is the scan status it must get:
"clean", "bad" or "error"), then ``done {command, directory, samples, exit_code}``.
On failure: ``error {message}`` then ``done`` with exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

if not __package__:  # run as a file: its package imported by name (see remotekit.remote)
    sys.modules.setdefault("remotekit", type(sys)("remotekit")).__dict__.setdefault(
        "__path__", [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    )
from remotekit.remote.protocol import emit, fail, finish


def train(torch, steps, seed=0):
    """A 32-64-10 MLP trained ``steps`` Adam steps on random data, as a checkpoint dict."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 10, (16,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": opt.state_dict(),
        "global_step": steps,
        "epoch": 0,
        "loss": loss.item(),
    }


# long: one short paragraph per sample, in the order the demo lists them.
def make(directory, steps):
    """Write the samples one by one; yields (name, path, expect, detail, planted) for each."""
    warnings.filterwarnings("ignore", message=".*Failed to initialize NumPy.*")
    import torch

    def path(name):
        d = os.path.join(directory, name)
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, "checkpoint.pt")

    ck = train(torch, steps)
    p = path("clean")
    torch.save(ck, p)
    yield ("clean", p, "clean", "trained %d Adam steps" % steps, [])

    ck = train(torch, steps + 1)
    w = ck["model_state_dict"]["0.weight"]
    w.view(-1)[[7, 300]] = float("nan")
    p = path("nan_weights")
    torch.save(ck, p)
    yield (
        (
            "nan_weights",
            p,
            "bad",
            "2 NaN in weights",
            [{"tensor": "model_state_dict.0.weight", "section": "weights", "nan": 2}],
        )
    )

    ck = train(torch, steps + 2)
    v = ck["optimizer_state_dict"]["state"][2]["exp_avg_sq"]
    v.view(-1)[[0, 5, 9]] = float("inf")
    p = path("inf_optimizer")
    torch.save(ck, p)
    yield (
        (
            "inf_optimizer",
            p,
            "bad",
            "3 +Inf in Adam exp_avg_sq",
            [
                {
                    "tensor": "optimizer_state_dict.state.2.exp_avg_sq",
                    "section": "optimizer",
                    "posinf": 3,
                }
            ],
        )
    )

    with open(os.path.join(directory, "clean", "checkpoint.pt"), "rb") as f:
        raw = f.read()
    p = path("truncated")
    with open(p, "wb") as f:
        f.write(raw[: len(raw) // 2])
    yield (("truncated", p, "error", "cut to %d of %d bytes" % (len(raw) // 2, len(raw)), []))

    ck = train(torch, steps)
    ck["args"] = argparse.Namespace(lr=1e-3, batch_size=16, run="demo")
    p = path("unsafe_global")
    torch.save(ck, p)
    yield (
        ("unsafe_global", p, "error", "pickles argparse.Namespace (refused by weights_only)", [])
    )


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ckpt_samples.py", description=__doc__.split("\n")[1])
    ap.add_argument("directory")
    ap.add_argument("--steps", type=int, default=5)
    opts = ap.parse_args(argv)
    try:
        os.makedirs(opts.directory, exist_ok=True)
        made = 0
        for name, p, expect, detail, planted in make(opts.directory, max(1, opts.steps)):
            made += 1
            emit(
                {
                    "type": "sample",
                    "name": name,
                    "path": p,
                    "expect": expect,
                    "detail": detail,
                    "planted": planted,
                }
            )
    except ImportError as e:
        return fail("samples", "cannot import torch with %s: %s" % (sys.executable, e))
    except OSError as e:
        return fail("samples", "cannot write samples in %s: %s" % (opts.directory, e))
    return finish("samples", 0, directory=opts.directory, samples=made)


if __name__ == "__main__":
    sys.exit(main())
