"""How checkpoint-4/ beside this file was made: a real transformers Trainer run (not a mock-up).

transformers 5.24 + accelerate on torch 2.13 CPU (installed with ``pip install --no-deps
--target DIR`` so that torch stays as it is), a 1-layer GPT-2 (n_embd 16, vocab 64), AdamW,
4 steps, ``save_steps=2``; checkpoint-4 kept::

    PYTHONPATH=DIR python make.py OUT

Kept as files because transformers is not a test dependency. Tests plant faults by
overwriting stored values in place (tests/ckpt_factory.py: plant_in_zip).
"""

from __future__ import annotations

import sys

import torch


class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": x, "labels": x}


def main() -> None:
    from transformers import (  # type: ignore[import-not-found]
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainingArguments,
    )

    cfg = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32)
    args = TrainingArguments(
        sys.argv[1],
        per_device_train_batch_size=4,
        max_steps=4,
        save_steps=2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
    )
    Trainer(model=GPT2LMHeadModel(cfg), args=args, train_dataset=Tokens()).train()


if __name__ == "__main__":
    main()
