"""docs/ stays true to the code: the generated tables are current (tools/gen_docs.py), and the
hand-written hosts.yaml key table names every key the inventory accepts."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from remotekit.inventory import HOST_KEYS, TOP_KEYS
from tests.harness import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import gen_docs

pytestmark = pytest.mark.timeout(120)


def test_the_generated_tables_are_current() -> None:
    stale = gen_docs.stale()
    assert not stale, f"stale generated tables in {stale}: run `{gen_docs.COMMAND}`"


def test_a_stale_table_is_found_and_regenerated(tmp_path: Path) -> None:
    for rel in gen_docs.TABLES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    tasks = tmp_path / "docs" / "tasks.md"
    fresh = tasks.read_text()
    tasks.write_text(
        re.sub(r"\n\| `demo` \|[^\n]*", "", fresh, count=1)
    )  # as before a task was added
    assert gen_docs.stale(tmp_path) == ["docs/tasks.md"]
    assert gen_docs.regenerate(tasks.read_text(), gen_docs.TABLES["docs/tasks.md"], "x") == fresh


def test_check_names_the_command_that_regenerates(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_docs.py"), "--bogus"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        r.returncode == 2
        and ".venv/bin/python tools/gen_docs.py [--check | --api [DIR]]" in r.stderr
    )


def test_the_generated_tables_list_every_task_and_hop() -> None:
    from remotekit.layers import HOPS

    for coll in (gen_docs.package_tasks(), gen_docs.repository_tasks()):
        tasks = gen_docs.task_table(coll)
        for name in coll.task_names:
            assert f"| `{name}" in tasks
    hops = gen_docs.hop_table()
    assert all(f"| `{key}:`" in hops for key in HOPS)
    assert "`pct exec VMID -- ARGV...`" in hops and "`srun --jobid=JOB --overlap --pty" in hops


def test_the_hosts_yaml_key_table_names_every_key() -> None:
    text = (ROOT / "docs" / "hosts-yaml.md").read_text()
    table = text[text.index("| key | meaning |") :].split("\n\n", 1)[0]
    documented = {
        k
        for cell in re.findall(r"^\| ([^|]*) \|", table, re.M)
        for k in re.findall(r"`([a-z_]+)`", cell)
    }
    assert not HOST_KEYS - documented, f"keys missing from the table: {HOST_KEYS - documented}"
    assert not documented - HOST_KEYS - {"key"}, f"not keys: {documented - HOST_KEYS}"
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert all(re.search(rf"^{k}:", example, re.M) for k in TOP_KEYS)


def test_the_api_reference_builds_without_warnings(tmp_path: Path) -> None:
    """pdoc over the public API, every warning an error (in a fresh interpreter: pdoc imports
    every module it documents)."""
    try:
        import pdoc  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true but pdoc is missing: it is in the dev extra (bash .ci/setup)")
        pytest.skip("pdoc is not installed (the dev extra: bash .ci/setup)")
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'tools')!r}); import gen_docs; "
    code += f"gen_docs.build_api(__import__('pathlib').Path({str(tmp_path)!r}))"
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr[-3000:]
    pages = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.html")}
    assert {"remotekit.html", "remotekit/diagnostics/checkpoints.html"} <= pages
    assert not any(p.startswith("remotekit/remote") for p in pages)
    assert 'id="diagnose"' in (tmp_path / "remotekit.html").read_text()  # the lazy one too


def test_the_public_api_is_documented() -> None:
    """Every class and function of ``remotekit.__all__`` and ``remotekit.diagnostics.*``, and
    each of their public methods, has a docstring (its own or the one it overrides)."""
    import importlib
    import inspect
    import pkgutil

    import remotekit
    import remotekit.diagnostics

    modules = [remotekit] + [
        importlib.import_module(f"remotekit.diagnostics.{m.name}")
        for m in pkgutil.iter_modules(remotekit.diagnostics.__path__)
    ]
    undocumented = []
    for mod in modules:
        names = getattr(mod, "__all__", None) or [
            n for n, v in vars(mod).items() if getattr(v, "__module__", None) == mod.__name__
        ]
        for name in names:
            obj = getattr(mod, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            members = [
                (f"{name}.{k}", getattr(obj, k))
                for k, v in (vars(obj).items() if inspect.isclass(obj) else ())
                if not k.startswith("_") and inspect.isfunction(v)
            ]
            for shown, member in [(name, obj), *members]:
                if not inspect.getdoc(member):
                    undocumented.append(f"{mod.__name__}.{shown}")
    assert not undocumented, f"no docstring: {undocumented}"


def _anchor(heading: str) -> str:
    """GitHub's id for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def test_every_link_in_readme_and_docs_resolves() -> None:
    pages = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "bench" / "RESULTS.md",
    ]
    anchors = {
        p: {
            _anchor(h)
            for h in re.findall(r"^#+ (.*)$", re.sub(r"(?ms)^```.*?^```", "", p.read_text()), re.M)
        }
        for p in pages
    }
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if file.startswith("docs/api"):
                continue  # built, not committed (gen_docs.py --api)
            if not dest.exists() or (anchor and anchor not in anchors.get(dest, set())):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, f"links that lead nowhere: {broken}"


def test_readme_is_a_landing_page_that_links_every_docs_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 120, "README is the five-minute page: reference goes to docs/"
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in text, f"README does not link docs/{page.name}"


def test_readmes_first_host_loads_and_its_chain_is_the_one_docs_show(tmp_path: Path) -> None:
    import remotekit

    block = (ROOT / "README.md").read_text().split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "hosts.yaml").write_text(block)
    inv = remotekit.load_inventory(tmp_path / "hosts.yaml")
    assert [s.name for s in inv.select_default()] == ["kpro6"]
    chain = remotekit.Target(inv.spec("kpro6")).chain
    assert chain == "ssh root@kpro6.lan -> pct exec 200 -> /root/venv/bin/python"
    api = " ".join((ROOT / "docs" / "api.md").read_text().split())
    assert f"`t.chain` is `{chain}`" in api
