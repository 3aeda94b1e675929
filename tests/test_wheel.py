"""`pip install remotekit` as a user gets it: the wheel, in a fresh venv without torch.

The wheel is built from a copy of the tree (so no build/ lands in the repository), installed
with pip into a new venv whose only other packages are remotekit's dependencies and theirs,
taken from the venv running the tests (offline: pip sees them already installed through a
``.pth`` file, so it resolves the wheel's Requires-Dist without an index; one missing from the
wheel's metadata fails the install). torch is not among them, so ``remotekit ping`` on
``local`` (this venv's Python) must say torch is missing and exit 1.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.harness import FAKES, ROOT

pytestmark = pytest.mark.slow


def dependency_closure(*requirements: str) -> set[str]:
    """The installed distributions ``requirements`` need, themselves included (the
    requirements that apply here: markers evaluated, no extras)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = req.name.lower().replace("_", "-")
        if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        todo += [Requirement(r) for r in metadata.requires(name) or ()]
    return seen


def link_distributions(names: set[str], into: Path) -> None:
    """Symlink each distribution's top-level files and its metadata directory into ``into``."""
    into.mkdir()
    for name in names:
        dist = metadata.distribution(name)
        top = {Path(str(f)).parts[0] for f in dist.files or () if ".." not in Path(str(f)).parts}
        for entry in top:
            source = Path(str(dist.locate_file(entry)))
            if source.exists() and not (into / entry).exists():
                (into / entry).symlink_to(source)


def metadata_requires(wheel: Path) -> list[str]:
    """The wheel's own Requires-Dist (its extras left out by their markers)."""
    with zipfile.ZipFile(wheel) as z:
        [name] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        text = z.read(name).decode()
    return [
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "remotekit", src / "remotekit", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = tmp_path_factory.mktemp("dist")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), "."],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    [whl] = out.glob("remotekit-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no pip, no torch) with the wheel installed: its bin/ directory."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root / "env", with_pip=False)
    python = root / "env" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = dependency_closure(*metadata_requires(wheel))
    assert {"fabric", "invoke", "pyyaml"} <= deps and "torch" not in deps
    link_distributions(deps, root / "deps")
    (Path(purelib) / "remotekit-test-deps.pth").write_text(f"{root / 'deps'}\n")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    done = subprocess.run(
        [*pip, "install", "--no-index", str(wheel)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "env" / "bin"


def remotekit(
    bin: Path, *args: str, cwd: Path, module: bool = False, path: str = ""
) -> subprocess.CompletedProcess[str]:
    """The installed command, run from a directory with no tasks.py and no hosts.yaml, with a
    clean environment (no PYTHONPATH: the repository's copy must not be the one imported);
    ``path``: a folder put first on PATH."""
    env = {"PATH": f"{path}:{bin}:/usr/bin:/bin".lstrip(":"), "HOME": str(cwd), "LANG": "C.UTF-8"}
    argv = [str(bin / "python"), "-m", "remotekit"] if module else [str(bin / "remotekit")]
    return subprocess.run(
        [*argv, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_wheel_ships_every_remote_script(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    remote = ROOT / "remotekit" / "remote"
    shipped = {f"remotekit/remote/{p.relative_to(remote).as_posix()}" for p in remote.rglob("*.py")}
    assert "remotekit/remote/ckpt/base.py" in shipped  # the shipped packages too
    assert "remotekit/remote/runner.py" in names  # the wheel's own list, not the source tree
    assert sorted(shipped - names) == []
    assert "remotekit/cli/main.py" in names and "remotekit/tasks.py" in names
    assert "remotekit/hosts_starter.yaml" in names  # what `hosts --init` writes


def test_the_installed_command_lists_its_tasks_anywhere(
    installed: Path, wheel: Path, tmp_path: Path
) -> None:
    for module in (False, True):
        r = remotekit(installed, "--list", cwd=tmp_path, module=module)
        assert r.returncode == 0, r.stderr
        for name in ("hosts", "ping", "run", "ckpt-scan", "train-log", "sync", "demo"):
            assert f"  {name} " in r.stdout
        assert "bench" not in r.stdout  # a dev task of the repository, not of the package
    r = remotekit(installed, "--help", "ping", cwd=tmp_path)
    assert r.returncode == 0 and "--host" in r.stdout and "--inventory" in r.stdout
    r = remotekit(installed, "--version", cwd=tmp_path)
    version = wheel.name.split("-")[1]  # the package's version, as pyproject.toml gives it
    assert r.returncode == 0 and r.stdout.split() == ["remotekit", version]
    r = remotekit(installed, "--print-completion-script", "bash", cwd=tmp_path)
    assert r.returncode == 0 and "complete -F" in r.stdout and "remotekit" in r.stdout


def test_the_installed_command_runs_the_engine_without_torch(
    installed: Path, tmp_path: Path
) -> None:
    r = remotekit(installed, "hosts", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "(embedded default)" in r.stdout and "local" in r.stdout
    r = remotekit(installed, "hosts", "--init", cwd=tmp_path)  # the starter is in the wheel
    assert r.returncode == 0 and (tmp_path / ".config/remotekit/hosts.yaml").is_file(), r.stderr
    no_torch = subprocess.run(
        [str(installed / "python"), "-c", "import torch"], capture_output=True
    )
    assert no_torch.returncode != 0  # the venv really is without torch
    r = remotekit(installed, "ping", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert re.search(r"warn torch: not importable: .*No module named 'torch'", r.stdout), r.stdout
    assert "needed only for the checkpoint diagnostics" in r.stdout and "FAIL" not in r.stdout
    assert str(installed / "python") in r.stdout  # local is the venv's own Python


def test_the_installed_command_is_what_it_shows(installed: Path, tmp_path: Path) -> None:
    """The command line as typed, on the wheel's own command: remotekit's options only,
    usage errors exit 2 with a hint, commands after --, completion of host names, and a pipe
    closed early ends quietly."""
    r = remotekit(installed, "--help", cwd=tmp_path)
    core = r.stdout.split("Subcommands:")[0]
    assert r.returncode == 0 and "--list" in core and "--dry" not in core and "--pty" not in core
    r = remotekit(installed, "ckpt-scna", cwd=tmp_path)
    assert r.returncode == 2 and "did you mean ckpt-scan" in r.stderr
    r = remotekit(installed, "run", "--", "sh", "-c", 'echo "[$1]"', "-", "a b", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines() == ["local | [a b]"], r.stderr
    (tmp_path / "hosts.yaml").write_text("hosts:\n  kpro6: {}\n")
    complete = [installed, "--complete", "--", "remotekit", "ping"]
    assert remotekit(*complete, "--host", "kp", cwd=tmp_path).stdout.split() == ["kpro6"]
    assert remotekit(*complete, "--host=kp", cwd=tmp_path).stdout.split() == ["--host=kpro6"]
    r = remotekit(*complete, "--host", "kpro6,", cwd=tmp_path)
    assert r.stdout.split() == ["kpro6,local"]
    env = {"PATH": f"{installed}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    p = subprocess.Popen(
        [str(installed / "remotekit"), "--list"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # `remotekit --list | head -0`
    assert p.stderr.read() == b"" and p.wait(timeout=60) == 141


def test_the_installed_command_hints_dry_runs_copies_and_counts_gpus(
    installed: Path, tmp_path: Path
) -> None:
    """The wheel's own command: words after -- from the argv given in-process, the long flag
    for an old short one, --dry-run, get --parents, and a GPU short of hosts.yaml's count."""
    code = (
        "import sys; from remotekit.cli.main import program; sys.argv = ['x', '--', 'nope']; "
        "program.run(['remotekit', 'run', '--', 'echo', 'a  b'])"
    )
    r = subprocess.run(
        [str(installed / "python"), "-c", code],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout == "local | a  b\n", r.stderr
    r = remotekit(installed, "ping", "-h", "gpu1", cwd=tmp_path)
    assert r.returncode == 2 and "use --host gpu1" in r.stderr
    r = remotekit(installed, "ping", "-i", "x.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "use --inventory FILE" in r.stderr
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  local: {gpus: 8}\n  far: {ssh: nobody@127.0.0.1:1, container: 200}\n"
    )
    r = remotekit(installed, "gpu", "--host", "far", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0 and "-> pct exec 200 -> python3 -u '<shipped sysinfo.py>' gpu" in (
        r.stdout
    ), r.stdout + r.stderr
    (tmp_path / "blob").write_bytes(b"x" * 100)
    r = remotekit(installed, "put", "--src", "blob", "--dest", "copy", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "local: local -> put blob copy\n"
    assert not (tmp_path / "copy").exists()
    r = remotekit(installed, "get", "--src", "blob", "--dest", "a/b/", "--parents", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "a" / "b" / "blob").read_bytes() == b"x" * 100
    smi = tmp_path / "smi"
    smi.mkdir()
    shutil.copy2(FAKES / "nvidia-smi", smi / "nvidia-smi")
    (smi / "scenario").write_text("lost-gpu\n")
    r = remotekit(installed, "gpu", "--host", "local", cwd=tmp_path, path=str(smi))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "7 GPU(s) seen where 8 are declared (gpus: 8)" in r.stdout


def test_the_installed_command_targets_reports_and_helps(installed: Path, tmp_path: Path) -> None:
    """The rest of the command line on the wheel's own command: TASK --help where the task
    takes a positional argument, py SCRIPT -- ARGS, hosts.yaml's default and the note for an
    implicit local, one host's failure said once without a table, put --parents, and a
    machine without a GPU getting a note."""
    for task in ("py", "sync", "logs"):
        r = remotekit(installed, task, "--help", cwd=tmp_path)
        assert r.returncode == 0 and f"remotekit [--core-opts] {task} [--options]" in r.stdout
    (tmp_path / "train.py").write_text("import sys\nprint(sys.argv[1:])\n")
    r = remotekit(installed, "py", "train.py", "--", "--lr", "3e-4", "a b", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "local | ['--lr', '3e-4', 'a b']\n", r.stderr
    (tmp_path / "hosts.yaml").write_text("hosts:\n  box: {env: {WHERE: box}}\n")
    where = ["run", "--", "sh", "-c", "echo ${WHERE:-here}"]
    r = remotekit(installed, *where, cwd=tmp_path)  # other hosts, no default: says so once
    assert r.stdout == "local | here\n" and "running on local" in r.stderr
    assert len(r.stderr.splitlines()) == 1
    (tmp_path / "hosts.yaml").write_text("hosts:\n  box: {env: {WHERE: box}}\ndefault: box\n")
    r = remotekit(installed, *where, cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (0, "box | box\n", "")
    r = remotekit(installed, "run", "--timeout", "1", "--", "sh", "-c", "echo one; sleep 30",
                  cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2 and "finding" not in r.stdout
    assert (r.stdout + r.stderr).count("timed out after 1 s") == 1
    (tmp_path / "blob").write_bytes(b"y" * 10)
    r = remotekit(installed, "put", "--src", "blob", "--dest", "x/y/blob", "--parents",
                  cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0 and (tmp_path / "x" / "y" / "blob").read_bytes() == b"y" * 10
    no_gpu = tmp_path / "bin"  # a PATH with sh and the tools, without any nvidia-smi
    no_gpu.mkdir()
    for tool in ("sh", "env", "cat", "ls", "df", "uname"):
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found:
            (no_gpu / tool).symlink_to(found)
    env = {"PATH": f"{installed}:{no_gpu}", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    (tmp_path / "hosts.yaml").unlink()
    r = subprocess.run(
        [str(installed / "remotekit"), "gpu"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "note: no GPU here" in r.stdout, r.stdout + r.stderr
