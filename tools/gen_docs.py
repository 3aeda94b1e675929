"""Regenerate the tables in docs/ that the code already knows: ``python tools/gen_docs.py``.

Each table sits between two marker comments in a docs file::

    <!-- generated: tasks (python tools/gen_docs.py) -->
    ...
    <!-- end generated: tasks -->

and is written from the code: ``tasks`` from the package's task collection (the ``remotekit``
command: name, the docstring's first paragraph, the flags), ``dev-tasks`` the same from this
repository's tasks.py (``invoke --list``: ``bench``), ``hops`` from the hop classes in remotekit/layers/ (hosts.yaml key, argv, ``shell`` argv, ping probe,
the tool's words that name an error). ``--check`` writes nothing and exits 1 when a table is
stale; tests/test_docs.py runs it. A new task, flag or hop is then a regeneration, not an edit.

``--api [DIR]`` builds the API reference from the docstrings with pdoc (the dev extra) into
DIR (default docs/api/, not committed): the public API, ``remotekit`` (its ``__all__``) and
``remotekit.diagnostics.*``. Any warning is an error, as the test that builds it requires.

It lives in tools/, not in the package: docs/ is not shipped, and the dev-task table reads the
repository's tasks.py.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import sys
from collections.abc import Callable
from pathlib import Path

from invoke import Collection
from invoke.parser import Argument

from remotekit.layers import Hop

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python tools/gen_docs.py"


def package_tasks() -> Collection:
    """The ``remotekit`` command's task collection."""
    from remotekit.cli import ns

    return ns


def repository_tasks() -> Collection:
    """This repository's dev tasks (tasks.py, ``invoke --list``: ``bench``)."""
    sys.path.insert(0, str(ROOT))
    try:
        import tasks
    finally:
        sys.path.remove(str(ROOT))
    return Collection.from_module(tasks)


def _cell(text: str) -> str:
    """``text`` inside a Markdown table cell: a ``|`` escaped (also inside code spans, as GFM
    reads them), reST's double backticks as Markdown's single ones."""
    return text.replace("``", "`").replace("|", "\\|")


def _first_paragraph(doc: str | None) -> str:
    return _cell(" ".join((doc or "").strip().split("\n\n")[0].split()))


def _flag(arg: Argument) -> str:
    name = next((n for n in arg.names if len(n) > 1), arg.names[0])
    shorts = [f"-{n}" for n in arg.names if len(n) == 1 and n != name]
    dashes = "-" if len(name) == 1 else "--"
    words = [*shorts, f"{dashes}{name}"]
    if arg.kind is bool:
        shown = f"--no-{name}" if arg.default is True else "/".join(words)
    else:
        value = {int: "N", float: "N"}.get(arg.kind, name.upper().replace("-", "_"))
        value = f"[{value}]" if arg.optional else value
        shown = "/".join(words) + f" {value}"
    return f"`{shown}`" + (" (repeatable)" if arg.kind is list else "")


def task_table(coll: Collection) -> str:
    """One row per task of ``coll``: its name, what it does (the docstring's first paragraph),
    its flags."""
    from remotekit.cli.selection import SELECT_HELP

    selection = set(SELECT_HELP)
    rows = ["| task | what it does | flags |", "|---|---|---|"]
    for name in coll.task_names:
        task = coll[name]
        args = copy.deepcopy(task).get_arguments()  # get_arguments consumes the help dict
        names = {a.name.replace("_", "-") for a in args}
        shared = selection <= names
        flags = [_flag(a) for a in args if not (a.positional or (shared and a.name in selection))]
        if shared:
            flags.insert(0, "[selection](#selecting-targets)")
        usage = " ".join([name, *(a.name.upper() for a in args if a.positional)])
        rows.append(f"| `{usage}` | {_first_paragraph(task.__doc__)} | {', '.join(flags)} |")
    return "\n".join(rows)


def _placeholder(hop: type[Hop]) -> Hop:
    """The hop with each field that has no default value (or None) named by its own name:
    ``Pct(vmid="VMID")``, so its argv reads as a template."""
    values = {
        f.name: f.name.upper()
        for f in dataclasses.fields(hop)  # type: ignore[arg-type]  # every hop is one
        if f.default is dataclasses.MISSING or f.default is None
    }
    return hop(**values)


def _words(argv: tuple[str, ...]) -> str:
    return _cell(" ".join(argv))


def hop_table() -> str:
    """One row per hop (sudo, then each container hop), from the classes themselves."""
    from remotekit.layers import HOPS, Launch, Sudo

    inner = Launch(argv=("ARGV...",))
    rows = [
        "| hosts.yaml | enters | argv | `shell` (a terminal) | ping probe: up when it says | "
        "the tool's words that name an error |",
        "|---|---|---|---|---|---|",
    ]
    hops: list[type[Hop]] = [Sudo, *HOPS.values()]
    for cls in hops:
        hop = _placeholder(cls)
        keys = ", ".join(f"`{k}:`" for k in (cls.key, *cls.options))
        argv, shell = hop.apply(inner).argv, hop.interactive(inner).argv
        probe = f"`{_words(hop.probe())}`" + (f": `{cls.up}`" if cls.up else ": exit 0")
        words = "<br>".join(
            f"`{_cell(f.pattern)}`"
            + (f" (exit {f.code})" if f.code is not None else "")
            + (f" (probe: `{_cell(f.status)}`)" if f.status else "")
            + f": {f.error.__name__}"
            for f in cls.failures
        )
        rows.append(
            f"| {keys} | {_first_paragraph(cls.__doc__)} | `{_words(argv)}` | "
            f"{'same' if shell == argv else f'`{_words(shell)}`'} | {probe} | {words} |"
        )
    return "\n".join(rows)


#: The modules of the public API reference (pdoc module specs: a ``!`` excludes).
API_MODULES = ("remotekit", "remotekit.diagnostics", "!remotekit.remote")


def build_api(out: Path) -> None:
    """The API reference as HTML in ``out``; a warning pdoc gives (an annotation it cannot
    resolve, a name in ``__all__`` it cannot find) raises it as an error."""
    import warnings

    import pdoc

    import remotekit

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        remotekit.diagnose  # noqa: B018  (lazy: into the module's namespace, where pdoc reads)
        pdoc.pdoc(*API_MODULES, output_directory=out)


#: docs file -> table name -> its generator
TABLES: dict[str, dict[str, Callable[[], str]]] = {
    "docs/tasks.md": {
        "tasks": lambda: task_table(package_tasks()),
        "dev-tasks": lambda: task_table(repository_tasks()),
    },
    "docs/hosts-yaml.md": {"hops": hop_table},
}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- generated: {name} \(.*?\) -->\n)(.*?)(<!-- end generated: {name} -->)", re.S
    )


def regenerate(text: str, tables: dict[str, Callable[[], str]], where: str) -> str:
    """``text`` with each named table between its markers written anew."""
    for name, make in tables.items():
        found = _block(name).search(text)
        if found is None:
            raise SystemExit(
                f"{where}: no <!-- generated: {name} ({COMMAND}) --> ... "
                f"<!-- end generated: {name} --> markers"
            )
        text = text[: found.start(2)] + make() + "\n" + text[found.end(2) :]
    return text


def stale(root: Path = ROOT) -> list[str]:
    """The docs files (relative to ``root``) whose generated tables differ from the code."""
    return [
        rel
        for rel, tables in TABLES.items()
        if regenerate((root / rel).read_text(), tables, rel) != (root / rel).read_text()
    ]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--api"] and len(argv) <= 2:
        build_api(Path(argv[1]) if len(argv) == 2 else ROOT / "docs" / "api")
        return 0
    if argv not in ([], ["--check"]):
        print(f"usage: {COMMAND} [--check | --api [DIR]]", file=sys.stderr)
        return 2
    if argv == ["--check"]:
        old = stale()
        for rel in old:
            print(f"{rel}: generated tables are stale; run `{COMMAND}`", file=sys.stderr)
        return 1 if old else 0
    for rel, tables in TABLES.items():
        path = ROOT / rel
        text = path.read_text()
        new = regenerate(text, tables, rel)
        if new != text:
            path.write_text(new)
            print(f"{rel}: regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
