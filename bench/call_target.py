"""The function bench_engine.py calls there (a module of the caller's own: it ships)."""


def answer() -> dict[str, int]:
    return {"answer": 42}
