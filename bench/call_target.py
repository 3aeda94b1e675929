"""The function bench_engine.py calls there (a module of the caller's own: it ships)."""


def answer() -> dict[str, int]:
    return {"answer": 42}


def torch_version() -> dict[str, str]:
    import torch

    return {"torch": str(torch.__version__)}


def import_torch_locally() -> None:
    """Import torch with the far side's own finders only (Mitogen's importer set aside): a
    finder that says it can serve any module makes torch's ``find_spec("dill")`` true, and
    then its ``import dill`` fails (the master has none to serve)."""
    import sys

    theirs = [f for f in sys.meta_path if type(f).__module__.startswith("mitogen")]
    sys.meta_path[:] = [f for f in sys.meta_path if f not in theirs]
    try:
        import torch  # noqa: F401
    finally:
        sys.meta_path[:0] = theirs
