"""A training run's logger, as the follow tests need one: writes a log as it goes.

    trainlog_writer.py LOG [--format jsonl|csv|text|tfevents] [--baseline N] [--spike-at S ...]
                       [--nan-at S ...] [--go FILE] [--stop FILE] [--every SECONDS]
                       [--max-s SECONDS] [--split-at S] [--hold-at S]

Writes ``--baseline`` rows at once (steps 1..N, loss about 2.0), waits for ``--go`` (when
given) to exist, then one row every ``--every`` seconds with a spike (loss 20.5) at each
``--spike-at`` and a NaN at each ``--nan-at``, until ``--stop`` exists or ``--max-s`` passed.
``--split-at S``: the row of step S is written in two parts, the second once ``LOG.rest``
exists (a partial last line, as a logger that flushes mid-line leaves it). ``--hold-at S``:
before the row of step S, wait for ``LOG.hold`` to exist. At the end ``LOG.end`` says why it
stopped (``stop`` or ``max-s``) and each spike's line is timed in ``LOG.times`` (step and
Unix time of the write, one a line): what the bench measures from.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time


def loss_at(step: int, args: argparse.Namespace) -> float:
    if step in args.spike_at:
        return 20.5
    if step in args.nan_at:
        return math.nan
    return 2.0 + 0.02 * math.sin(step * 1.7) + 0.01 * math.cos(step * 0.37)


def line(step: int, loss: float, fmt: str) -> str:
    if fmt == "jsonl":
        return json.dumps({"step": step, "loss": loss}) + "\n"
    if fmt == "csv":
        return f"{step},{loss!r}\n"
    return f"step={step} loss={loss!r}\n"


class Log:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tb = None
        if args.format == "tfevents":
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(args.log)
            self.f = None
        else:
            self.f = open(args.log, "a")  # noqa: SIM115
            if args.format == "csv" and self.f.tell() == 0:
                self.f.write("step,loss\n")

    def row(self, step: int) -> None:
        if step == self.args.hold_at:
            wait_for(self.args.log + ".hold", self.args.max_s)
        loss = loss_at(step, self.args)
        if self.tb is not None:
            self.tb.add_scalar("loss", loss, step)
            self.tb.flush()
        elif step == self.args.split_at:
            text = line(step, loss, self.args.format)
            cut = text.index("loss") + 6  # "loss=2" of "loss=20.5"
            self.f.write(text[:cut])
            self.f.flush()
            wait_for(self.args.log + ".rest", self.args.max_s)  # the test saw the partial line
            self.f.write(text[cut:])
        else:
            self.f.write(line(step, loss, self.args.format))
        if self.f is not None:
            self.f.flush()
        if step in self.args.spike_at:
            with open(self.args.log + ".times", "a") as t:
                t.write(f"{step} {time.time()!r}\n")


def wait_for(path: str, max_s: float) -> bool:
    end = time.monotonic() + max_s
    while not os.path.exists(path):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--format", default="jsonl")
    ap.add_argument("--baseline", type=int, default=300)
    ap.add_argument("--spike-at", type=int, action="append", default=[])
    ap.add_argument("--nan-at", type=int, action="append", default=[])
    ap.add_argument("--split-at", type=int, default=None)
    ap.add_argument("--hold-at", type=int, default=None)
    ap.add_argument("--go", default="")
    ap.add_argument("--stop", default="")
    ap.add_argument("--every", type=float, default=0.02)
    ap.add_argument("--max-s", type=float, default=60.0)
    args = ap.parse_args()
    log = Log(args)
    for step in range(1, args.baseline + 1):
        log.row(step)
    end = time.monotonic() + args.max_s
    why = "max-s"
    if not args.go or wait_for(args.go, args.max_s):
        step = args.baseline
        while time.monotonic() < end:
            if args.stop and os.path.exists(args.stop):
                why = "stop"
                break
            step += 1
            log.row(step)
            time.sleep(args.every)
    with open(args.log + ".end", "w") as f:
        f.write(why)


if __name__ == "__main__":
    main()
