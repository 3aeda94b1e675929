"""The function bench_engine.py calls there (a module of the caller's own: it ships)."""


def answer() -> dict[str, int]:
    return {"answer": 42}


def torch_version() -> dict[str, str]:
    import torch

    return {"torch": str(torch.__version__)}
