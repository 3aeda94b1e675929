"""How the DeepSpeed checkpoints beside this file were made (real DeepSpeed, not a mock-up).

DeepSpeed 0.19.8 on torch 2.13 CPU, one process, gloo: a 212-parameter model (Linear 8->16,
Linear 16->4), AdamW, two steps, then ``engine.save_checkpoint(OUT)``::

    pip install --target DIR deepspeed  # it does not replace torch
    PYTHONPATH=DIR python make.py 1 zero1 ; python make.py 2 zero2
    python make.py 2 zero2_bf16 bf16   ; python make.py 3 zero3

Kept as files because DeepSpeed is not a test dependency (it compiles an op on first use).
Tests plant faults by overwriting stored values in place (tests/ckpt_factory.py).
"""

from __future__ import annotations

import os
import sys

import torch

os.environ.update(
    MASTER_ADDR="127.0.0.1",
    MASTER_PORT="29533",
    RANK="0",
    WORLD_SIZE="1",
    LOCAL_RANK="0",
    DS_ACCELERATOR="cpu",
)


def main() -> None:
    import deepspeed  # type: ignore[import-not-found]

    stage, out = int(sys.argv[1]), sys.argv[2]
    bf16 = len(sys.argv) > 3
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cfg: dict[str, object] = {
        "train_batch_size": 2,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
    }
    if bf16:
        cfg["bf16"] = {"enabled": True}
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    for _ in range(2):
        x = torch.randn(2, 8, dtype=torch.bfloat16 if bf16 else torch.float32)
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint(out)


if __name__ == "__main__":
    main()
