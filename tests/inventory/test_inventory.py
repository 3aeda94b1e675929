"""hosts.yaml: every bad input names the file, the line and the key."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

import remotekit
from remotekit.inventory import STARTER, Timeouts, config_inventory, init_inventory
from remotekit.layers import Docker, Kubectl, Lxc, Pct, Podman, Slurm, Sudo
from tests.harness import ROOT


def load(tmp_path: Path, text: str) -> remotekit.Inventory:
    p = tmp_path / "hosts.yaml"
    p.write_text(text)
    return remotekit.load_inventory(p)


def bad(tmp_path: Path, text: str) -> remotekit.InventoryError:
    with pytest.raises(remotekit.InventoryError) as info:
        load(tmp_path, text)
    assert str(tmp_path / "hosts.yaml") in str(info.value)
    return info.value


def test_the_shipped_example_loads() -> None:
    inv = remotekit.load_inventory(ROOT / "hosts.yaml")
    assert "local" in inv.hosts


def test_full_host(tmp_path: Path) -> None:
    inv = load(
        tmp_path,
        """
defaults:
  timeouts: {connect: 5, step: 100}
  env: {A: "1"}
hosts:
  kpro6:
    ssh: root@kpro6.lan:2222
    identity: ~/.ssh/id_ed25519
    host_key: accept-new
    jump: admin@bastion
    sudo: true
    container: 200
    venv: /root/venv
    workdir: /workspace
    env: {HF_HOME: /workspace/hf, N: 3}
    secret_env: [HF_TOKEN]
    checkpoints: /workspace/checkpoints
    timeouts: {step: 30}
groups:
  gpu: [kpro6]
""",
    )
    s = inv.spec("kpro6")
    assert s.ssh is not None and s.ssh.display == "root@kpro6.lan:2222"
    assert s.ssh.host_key == "accept-new" and s.ssh.jump is not None
    assert s.ssh.jump.display == "admin@bastion"
    assert s.sudo and s.hop == Pct(200) and s.interpreter == "/root/venv/bin/python"
    assert s.env == {"A": "1", "HF_HOME": "/workspace/hf", "N": "3"}
    assert s.timeouts == Timeouts(connect=5, step=30, kill_grace=1)
    assert s.source.endswith("hosts.yaml:6")
    assert inv.groups == {"gpu": ("kpro6",)}
    assert [h.name for h in inv.select(group="gpu")] == ["kpro6"]
    assert [h.name for h in inv.select(all=True)] == ["local", "kpro6"]


@pytest.mark.parametrize(
    ("value", "host", "user", "port"),
    [("kpro6", "kpro6", None, None), ("u@h:22", "h", "u", 22), ("[::1]:2200", "::1", None, 2200)],
)
def test_ssh_forms(
    tmp_path: Path, value: str, host: str, user: str | None, port: int | None
) -> None:
    s = load(tmp_path, f"hosts:\n  h:\n    ssh: '{value}'\n").spec("h").ssh
    assert s is not None and (s.host, s.user, s.port) == (host, user, port)


def test_local_is_embedded_and_uses_our_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REMOTEKIT_HOSTS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    inv = remotekit.load_inventory()
    assert list(inv.hosts) == ["local"]
    assert inv.spec("local").interpreter == sys.executable


def test_env_var_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "elsewhere.yaml"
    p.write_text("hosts:\n  a: {ssh: a}\n")
    monkeypatch.setenv("REMOTEKIT_HOSTS", str(p))
    assert list(remotekit.load_inventory().hosts) == ["local", "a"]


def test_malformed_yaml(tmp_path: Path) -> None:
    e = bad(tmp_path, "hosts:\n  a: {ssh: x\n  b: 1\n")
    assert e.line is not None and "invalid YAML" in str(e)


def test_unknown_key_with_hint(tmp_path: Path) -> None:
    e = bad(tmp_path, "hosts:\n  a:\n    ssh: x\n    contianer: 200\n")
    assert e.line == 4 and e.key == "hosts.a.contianer"
    assert "hosts.yaml:4" in str(e) and "did you mean 'container'" in str(e)


def test_unknown_top_level_key(tmp_path: Path) -> None:
    e = bad(tmp_path, "hosts: {}\nhost: {}\n")
    assert e.line == 2 and e.key == "host"


@pytest.mark.parametrize(
    ("snippet", "key", "words"),
    [
        ("container: abc", "hosts.a.container", "Proxmox CT id"),
        ("container: 5", "hosts.a.container", "Proxmox CT id"),
        ("sudo: 'yes'", "hosts.a.sudo", "true or false"),
        ("host_key: maybe", "hosts.a.host_key", "strict, accept-new"),
        ("env: [A]", "hosts.a.env", "mapping"),
        ("env: {'A-B': x}", "hosts.a.env.A-B", "environment variable name"),
        ("timeouts: {step: -1}", "hosts.a.timeouts.step", "seconds > 0"),
        ("timeouts: {stpe: 1}", "hosts.a.timeouts.stpe", "unknown timeout"),
        ("venv: ''", "hosts.a.venv", "non-empty string"),
        ("ssh: 'a b'", "hosts.a.ssh", "[user@]host[:port]"),
        ("ssh: 'a:99999'", "hosts.a.ssh", "1-65535"),
    ],
)
def test_wrong_types_name_line_and_key(tmp_path: Path, snippet: str, key: str, words: str) -> None:
    e = bad(tmp_path, f"hosts:\n  a:\n    {snippet}\n")
    assert e.key == key and e.line == 3
    assert words in str(e)


def test_jump_needs_ssh(tmp_path: Path) -> None:
    e = bad(tmp_path, "hosts:\n  a:\n    jump: bastion\n")
    assert e.key == "hosts.a.jump" and e.line == 3


def test_ssh_settings_without_ssh(tmp_path: Path) -> None:
    e = bad(tmp_path, "hosts:\n  a:\n    container: 200\n    identity: ~/.ssh/id\n")
    assert e.key == "hosts.a.identity" and e.line == 4 and "needs `ssh:`" in str(e)
    # from defaults they are fine: they apply to the hosts that do have ssh
    inv = load(tmp_path, "defaults:\n  identity: ~/.ssh/id\nhosts:\n  a: {ssh: a}\n")
    assert inv.spec("a").ssh.identity == "~/.ssh/id" and inv.spec("local").ssh is None  # type: ignore[union-attr]


def test_group_with_unknown_host(tmp_path: Path) -> None:
    e = bad(tmp_path, "hosts:\n  a: {ssh: a}\ngroups:\n  gpu:\n    - a\n    - b\n")
    assert e.line == 6 and "unknown host 'b'" in str(e) and "known hosts: local, a" in str(e)


def test_duplicate_key(tmp_path: Path) -> None:
    e = bad(tmp_path, "hosts:\n  a: {ssh: a}\n  a: {ssh: b}\n")
    assert e.line == 3 and "duplicate" in str(e)


def test_error_in_defaults_points_at_defaults(tmp_path: Path) -> None:
    e = bad(tmp_path, "defaults:\n  sudo: 1\nhosts:\n  a: {ssh: a}\n")
    assert e.key == "defaults.sudo" and e.line == 2


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    e = bad(tmp_path, "- a\n- b\n")
    assert e.line == 1


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(remotekit.InventoryError, match="file not found"):
        remotekit.load_inventory(tmp_path / "nope.yaml")


def test_unknown_target_lists_the_known_ones(tmp_path: Path) -> None:
    inv = load(tmp_path, "hosts:\n  kpro6: {ssh: a}\n  kpro7: {ssh: b}\n")
    with pytest.raises(remotekit.UnknownHost) as info:
        inv.target("kpro8")
    assert "'kpro8'" in str(info.value) and "local, kpro6, kpro7" in str(info.value)
    with pytest.raises(remotekit.UnknownHost, match="group:gpu"):
        inv.select(group="gpu")


# -- container hops: one per target, each validating its own keys ---------------------------


def test_every_hop_from_hosts_yaml(tmp_path: Path) -> None:
    inv = load(
        tmp_path,
        """
hosts:
  ct:   {container: '200', pct: /usr/sbin/pct}
  lx:   {lxc: box1}
  lx2:  {lxc: {name: box2, bin: /usr/bin/lxc-attach, keep_env: [TERM]}}
  pod:  {podman: web, engine: /usr/bin/podman}
  dock: {docker: web}
  job:  {slurm: {job: 4242, node: node07, bin: /usr/bin/srun}}
  job2: {slurm: {name: train-llama}}
  k8s:  {kubectl: {pod: trainer-0, container: main, namespace: ml, bin: /k/kubectl, context: c}}
""",
    )
    hops = {name: inv.spec(name).hop for name in inv.hosts}
    assert hops == {
        "local": None,
        "ct": Pct(200, "/usr/sbin/pct"),
        "lx": Lxc("box1"),
        "lx2": Lxc("box2", "/usr/bin/lxc-attach", ("TERM",)),
        "pod": Podman("web", "/usr/bin/podman"),
        "dock": Docker("web", "docker"),
        "job": Slurm(4242, node="node07", bin="/usr/bin/srun"),
        "job2": Slurm(job_name="train-llama"),
        "k8s": Kubectl("trainer-0", "main", "ml", "c", "/k/kubectl"),
    }
    assert inv.spec("job").interpreter == "python3"  # a container hop: not our own Python


@pytest.mark.parametrize(
    ("snippet", "key", "words"),
    [
        ("container: 99", "hosts.a.container", "100..999999999"),
        ("container: 1000000000", "hosts.a.container", "100..999999999"),
        ("container: '²⁰⁰'", "hosts.a.container", "ASCII digits"),
        ("container: '\uff12\uff10\uff10'", "hosts.a.container", "ASCII digits"),
        ("container: true", "hosts.a.container", "Proxmox CT id"),
        ("container: 2.5e2", "hosts.a.container", "Proxmox CT id"),
        ("lxc: ''", "hosts.a.lxc", "container name"),
        ("lxc: 'a/b'", "hosts.a.lxc", "container name"),
        ("lxc: [a]", "hosts.a.lxc", "container name"),
        ("lxc: {bin: /x}", "hosts.a.lxc.name", "needs `name:`"),
        ("lxc: {name: a, keepenv: [X]}", "hosts.a.lxc.keepenv", "unknown key"),
        ("lxc: {name: a, keep_env: [A-B]}", "hosts.a.lxc.keep_env", "environment variable"),
        ("podman: 'a b'", "hosts.a.podman", "container name"),
        ("docker: 5", "hosts.a.docker", "container name"),
        ("podman: w\n    engine: ''", "hosts.a.engine", "non-empty string"),
        ("slurm: 4242", "hosts.a.slurm", "mapping"),
        ("slurm: {job: -1}", "hosts.a.slurm.job", "positive integer"),
        ("slurm: {job: '\uff14\uff12'}", "hosts.a.slurm.job", "positive integer"),
        ("slurm: {node: n1}", "hosts.a.slurm.name", "exactly one of"),
        ("slurm: {job: 1, name: x}", "hosts.a.slurm.job", "exactly one of"),
        ("slurm: {job: 1, nodes: n1}", "hosts.a.slurm.nodes", "unknown key"),
        ("slurm: {job: 1, bin: ''}", "hosts.a.slurm.bin", "non-empty string"),
        ("kubectl: {container: c}", "hosts.a.kubectl.pod", "needs `pod:`"),
        ("kubectl: {pod: My_Pod}", "hosts.a.kubectl.pod", "Kubernetes name"),
        ("kubectl: {pod: p, namespace: 'a b'}", "hosts.a.kubectl.namespace", "Kubernetes name"),
        ("kubectl: {pod: p, ctx: x}", "hosts.a.kubectl.ctx", "unknown key"),
        ("kubectl: {pod: p, context: --token=x}", "hosts.a.kubectl.context", "leading '-'"),
        ("kubectl: {pod: p, context: 'a b'}", "hosts.a.kubectl.context", "no spaces"),
        ("kubectl: pod-1", "hosts.a.kubectl", "mapping"),
    ],
)
def test_hop_keys_name_line_and_key(tmp_path: Path, snippet: str, key: str, words: str) -> None:
    e = bad(tmp_path, f"hosts:\n  a:\n    {snippet}\n")
    assert e.key == key and e.line == (4 if "\n" in snippet else 3), str(e)
    assert words in str(e)


def test_at_most_one_container_hop(tmp_path: Path) -> None:
    e = bad(tmp_path, "hosts:\n  a:\n    lxc: box\n    venv: /v\n    podman: web\n")
    assert (e.key, e.line) == ("hosts.a.podman", 5)
    assert "at most one container hop" in str(e) and "`lxc:` is already set (line 3)" in str(e)


def test_a_hop_option_needs_its_hop(tmp_path: Path) -> None:
    e = bad(tmp_path, "hosts:\n  a:\n    ssh: a\n    pct: /usr/sbin/pct\n")
    assert (e.key, e.line) == ("hosts.a.pct", 4) and "needs `container:`" in str(e)
    e = bad(tmp_path, "hosts:\n  a:\n    lxc: box\n    engine: /usr/bin/podman\n")
    assert (e.key, e.line) == ("hosts.a.engine", 4) and "`podman:` or `docker:`" in str(e)
    # in defaults an option is fine: it applies to the hosts that have the hop
    inv = load(tmp_path, "defaults:\n  pct: /p\nhosts:\n  a: {container: 200}\n  b: {ssh: b}\n")
    assert inv.spec("a").hop == Pct(200, "/p") and inv.spec("b").hop is None


def test_a_hop_in_defaults_is_reported_where_it_was_written(tmp_path: Path) -> None:
    e = bad(tmp_path, "defaults:\n  slurm: {job: x}\nhosts:\n  a: {ssh: a}\n")
    assert (e.key, e.line) == ("defaults.slurm.job", 2)


def test_the_docs_examples_of_each_hop_load(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "hosts-yaml.md").read_text()
    block = doc.split("## Container hops: one example each", 1)[1].split("```yaml\n", 1)[1]
    inv = load(tmp_path, block.split("```", 1)[0])
    kinds = {type(s.hop) for s in inv if s.hop is not None}
    assert kinds == {Pct, Lxc, Podman, Docker, Slurm, Kubectl}
    job = remotekit.Target(inv.spec("job"))
    assert job.chain == "ssh gpu@login1 -> srun --jobid 4242 -w node07 -> /scratch/venv/bin/python"


def test_default_names_a_host_or_a_group(tmp_path: Path) -> None:
    hosts = "hosts:\n  a: {ssh: a}\n  b: {ssh: b}\ngroups:\n  gpu: [a, b]\n"
    assert [s.name for s in load(tmp_path, hosts).select_default()] == ["local"]
    assert [s.name for s in load(tmp_path, hosts + "default: b\n").select_default()] == ["b"]
    inv = load(tmp_path, hosts + "default: gpu\n")
    assert inv.default == "gpu" and [s.name for s in inv.select_default()] == ["a", "b"]
    e = bad(tmp_path, hosts + "default: gpus\n")
    assert e.line == 6 and e.key == "default" and "known: local, a, b, gpu (group)" in str(e)
    e = bad(tmp_path, hosts + "default: [a]\n")
    assert e.key == "default"


# -- chains: `hops:` and `jump:` lists -------------------------------------------------------------

CHAIN = """\
hosts:
  trainer:
    ssh: root@pve1
    jump: [admin@bastion, gw2:2200]
    hops:
      - container: 200
        pct: /usr/sbin/pct
      - docker: trainer
      - sudo: alice
    venv: /opt/venv
"""


def test_a_chain_of_any_depth_in_order(tmp_path: Path) -> None:
    s = load(tmp_path, CHAIN).spec("trainer")
    assert s.hops == (Pct(200, "/usr/sbin/pct"), Docker("trainer"), Sudo(as_user="alice"))
    assert s.hop == Docker("trainer") and s.sudo  # the innermost container; sudo somewhere
    t = remotekit.Target(s)
    assert t.chain == (
        "ssh root@pve1 -> pct exec 200 -> docker exec trainer -> sudo -u alice -> /opt/venv/bin/python"
    )
    # ProxyJump admin@bastion,gw2:2200: the target through gw2, gw2 through the bastion
    assert s.ssh is not None and s.ssh.jump is not None and s.ssh.jump.jump is not None
    assert (s.ssh.jump.display, s.ssh.jump.jump.display) == ("gw2:2200", "admin@bastion")
    assert s.ssh.jump.jump.jump is None


def test_single_keys_are_a_chain_of_one_or_two(tmp_path: Path) -> None:
    inv = load(tmp_path, "hosts:\n  a: {ssh: u@n, sudo: true, lxc: box}\n  b: {podman: web}\n")
    assert inv.spec("a").hops == (Sudo(user="u"), Lxc("box"))
    assert inv.spec("b").hops == (Podman("web"),)
    one = load(
        tmp_path, "hosts:\n  a:\n    ssh: u@n\n    hops:\n      - sudo: true\n      - lxc: box\n"
    )
    assert one.spec("a").hops == inv.spec("a").hops  # sudo first in the list: the SSH user's


@pytest.mark.parametrize(
    ("item", "key", "words"),
    [
        ("- 200", "hosts.a.hops[1]", "expected a hop mapping with one of `sudo:`, `container:`"),
        ("- {}", "hosts.a.hops[1]", "names no hop"),
        ("- contianer: 201", "hosts.a.hops[1]", "names no hop (did you mean 'container'?)"),
        ("- {lxc: box, podman: web}", "hosts.a.hops[1].podman", "one hop per item"),
        ("- {podman: web, pct: /p}", "hosts.a.hops[1].pct", "unknown key"),
        ("- {podman: 'a b'}", "hosts.a.hops[1].podman", "container name"),
        ("- {slurm: {job: -1}}", "hosts.a.hops[1].slurm.job", "positive integer"),
        ("- {sudo: false}", "hosts.a.hops[1].sudo", "must be on"),
        ("- {sudo: 'al ice'}", "hosts.a.hops[1].sudo", "a user name"),
        ("- {sudo: 'yes'}", "hosts.a.hops[1].sudo", "a user name"),
        ("- {sudo: {user: bob, pw: x}}", "hosts.a.hops[1].sudo.pw", "unknown key"),
    ],
)
def test_a_bad_hop_in_the_chain_is_named_by_its_index_and_line(
    tmp_path: Path, item: str, key: str, words: str
) -> None:
    e = bad(tmp_path, f"hosts:\n  a:\n    hops:\n      - container: 200\n      {item}\n")
    assert (e.key, e.line) == (key, 5), str(e)
    assert str(e).startswith(f"{tmp_path / 'hosts.yaml'}:5: {key}: ") and words in str(e)


def test_hops_and_single_keys_do_not_mix(tmp_path: Path) -> None:
    e = bad(tmp_path, "hosts:\n  a:\n    hops: [{lxc: box}]\n    sudo: true\n")
    assert (e.key, e.line) == ("hosts.a.sudo", 4)
    assert "cannot be set beside `hops:` (line 3)" in str(e)
    e = bad(tmp_path, "defaults:\n  container: 200\nhosts:\n  a:\n    hops: [{lxc: box}]\n")
    assert (e.key, e.line) == ("defaults.container", 2)  # where it was written
    e = bad(tmp_path, "hosts:\n  a:\n    hops: {lxc: box}\n")
    assert (e.key, e.line) == ("hosts.a.hops", 3) and "a list of hops" in str(e)
    e = bad(tmp_path, "hosts:\n  a:\n    sudo: alice\n")  # another user: an item of the list
    assert e.key == "hosts.a.sudo" and "`- sudo: USER` of `hops:`" in str(e)
    # `sudo: false` beside the list says nothing: it is not a hop
    inv = load(tmp_path, "hosts:\n  a:\n    sudo: false\n    hops: [{lxc: box}]\n")
    assert inv.spec("a").hops == (Lxc("box"),)


def test_a_bad_jump_in_the_list_is_named_by_its_index(tmp_path: Path) -> None:
    e = bad(tmp_path, "hosts:\n  a:\n    ssh: a\n    jump:\n      - gw1\n      - 'x y'\n")
    assert (e.key, e.line) == ("hosts.a.jump[1]", 6) and "[user@]host[:port]" in str(e)
    e = bad(tmp_path, "hosts:\n  a:\n    ssh: a\n    jump: []\n")
    assert e.key == "hosts.a.jump" and "non-empty list" in str(e)


def test_the_docs_chains_load_as_they_say(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "hosts-yaml.md").read_text()
    section = doc.split("## Chains: hops of any depth", 1)[1]
    inv = load(tmp_path, section.split("```yaml\n", 1)[1].split("```", 1)[0])
    chain = remotekit.Target(inv.spec("trainer")).chain
    shown = " ".join(section.split("`remotekit hosts` shows `", 1)[1].split("`", 1)[0].split())
    assert chain == shown
    assert [type(h) for h in inv.spec("jobpod").hops] == [Slurm, Podman]
    e = bad(
        tmp_path, "hosts:\n  trainer:\n    hops:\n      - container: 200\n      - docker: 'a b'\n"
    )
    said = doc.split("an item of a chain by its place (`", 1)[1].split("`)", 1)[0]
    assert str(e).endswith(said.split("hosts.yaml", 1)[1].replace(":9:", ":5:"))


# -- where hosts.yaml is looked for, and the starting one -----------------------------------


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(home, project folder): run from a project folder with a home of its own, no
    $REMOTEKIT_HOSTS and no $XDG_CONFIG_HOME."""
    home, proj = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    proj.mkdir()
    monkeypatch.chdir(proj)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("REMOTEKIT_HOSTS", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home, proj


def test_unknown_target_says_where_hosts_yaml_was_looked_for(elsewhere: tuple[Path, Path]) -> None:
    """The issue's case: the hosts.yaml edited is not the one read. The error names every
    place looked at, what each held, and which was read."""
    home, proj = elsewhere
    config = home / ".config" / "remotekit" / "hosts.yaml"
    with pytest.raises(remotekit.UnknownHost) as info:
        remotekit.load_inventory().target("kpro6")
    assert str(info.value) == (
        "unknown target 'kpro6'; known targets: local; no hosts.yaml found, looked for: "
        f"$REMOTEKIT_HOSTS (not set), {proj}/hosts.yaml (no file), {config} (no file); "
        f"`remotekit hosts --init` writes a starting one to {config}"
    )
    config.parent.mkdir(parents=True)
    config.write_text("hosts:\n  kpro6: {ssh: a}\n")
    (proj / "hosts.yaml").write_text("hosts:\n  ct: {ssh: b}\n")  # found first
    inv = remotekit.load_inventory()
    with pytest.raises(remotekit.UnknownHost) as info:
        inv.select(hosts="kpro6")
    assert str(info.value) == (
        f"unknown target 'kpro6' in {proj}/hosts.yaml; known targets: local, ct; hosts.yaml "
        f"looked for: $REMOTEKIT_HOSTS (not set), {proj}/hosts.yaml (read), {config} "
        "(also there, not read)"
    )
    with pytest.raises(remotekit.UnknownHost, match=r"in .*/proj/hosts.yaml; known targets: "):
        inv.select(group="gpu")
    named = remotekit.load_inventory(config)  # named: nothing was looked for
    assert named.looked == ()
    with pytest.raises(remotekit.UnknownHost) as info:
        named.target("ct")
    assert str(info.value) == f"unknown target 'ct' in {config}; known targets: local, kpro6"


def test_a_missing_file_named_by_the_variable_says_so(
    elsewhere: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMOTEKIT_HOSTS", "/nonexistent/hosts.yaml")
    with pytest.raises(remotekit.InventoryError, match=r"not found \(named by \$REMOTEKIT_HOSTS\)"):
        remotekit.load_inventory()


def test_the_users_hosts_yaml_follows_xdg_config_home(
    elsewhere: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, _ = elsewhere
    xdg = home / "xdg" / "remotekit" / "hosts.yaml"
    old = home / ".config" / "remotekit" / "hosts.yaml"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    for p, name in ((xdg, "x"), (old, "o")):
        p.parent.mkdir(parents=True)
        p.write_text(f"hosts:\n  {name}: {{}}\n")
    assert config_inventory() == xdg
    assert list(remotekit.load_inventory().hosts) == ["local", "x"]
    xdg.unlink()  # one written under ~/.config before $XDG_CONFIG_HOME was read: still read
    inv = remotekit.load_inventory()
    assert list(inv.hosts) == ["local", "o"]
    assert [str(x) for x in inv.looked[1:]] == [
        f"{Path.cwd()}/hosts.yaml (no file)",
        f"{xdg} (no file)",
        f"{old} (read)",
    ]
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/cfg")  # not absolute: ignored, as XDG says
    assert config_inventory() == old


def test_init_writes_a_private_starting_file_that_loads_as_is(
    elsewhere: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home, _ = elsewhere
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "cfg"))
    path = init_inventory()
    assert path == home / "cfg" / "remotekit" / "hosts.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    inv = remotekit.load_inventory()  # the file just written is the one found, and loads
    assert inv.path == str(path) and list(inv.hosts) == ["local"]
    text = path.read_text()
    assert "# kpro6:" in text and "remotekit hosts" in text  # a commented starting point
    path.write_text("hosts:\n  mine: {}\n")
    with pytest.raises(remotekit.InventoryError, match="already exists") as info:
        init_inventory()
    assert str(path) in str(info.value)
    assert path.read_text() == "hosts:\n  mine: {}\n"  # never overwritten
    there = init_inventory(home / "named.yaml")
    assert there == home / "named.yaml" and list(remotekit.load_inventory(there).hosts) == ["local"]


def test_the_clones_hosts_yaml_is_the_starter_with_its_own_header() -> None:
    """One text: the examples a clone shows are the ones `hosts --init` writes."""
    clone, starter = (ROOT / "hosts.yaml").read_text(), STARTER.read_text()
    body = "\ndefaults:"
    assert clone[clone.index(body) :] == starter[starter.index(body) :]
    assert "invoke hosts" not in clone  # `invoke` has no such task: "No idea what 'hosts' is!"


def test_each_hop_knows_the_hosts_yaml_line_that_sets_its_tool(tmp_path: Path) -> None:
    """`pct:` (or the hop's own key when its tool is the default), a nested `bin:`, an item
    of `hops:`: the line a "not found" message points to."""
    text = (
        "hosts:\n"  # 1
        "  dflt:\n"  # 2
        "    container: 201\n"  # 3
        "  box:\n"  # 4
        "    ssh: a@b\n"  # 5
        "    container: 200\n"  # 6
        "    pct: /usr/sbin/pct\n"  # 7
        "  other:\n"  # 8
        "    ssh: a@b\n"  # 9
        "  l:\n"  # 10
        "    lxc: {name: c1,\n"  # 11
        "          bin: /x/lxc-attach}\n"  # 12
        "  chain:\n"  # 13
        "    ssh: a@b\n"  # 14
        "    hops:\n"  # 15
        "      - sudo: true\n"  # 16
        "      - container: 200\n"  # 17
        "        pct: /p\n"  # 18
        "      - lxc: c2\n"  # 19
    )
    inv = load(tmp_path, text)
    path = str(tmp_path / "hosts.yaml")
    lines = {name: [int(s.rsplit(":", 1)[1]) for s in inv.spec(name).hop_sources]
             for name in ("box", "dflt", "l", "chain")}  # fmt: skip
    assert all(s.startswith(path + ":") for s in inv.spec("chain").hop_sources)
    assert lines == {"box": [7], "dflt": [3], "l": [12], "chain": [16, 18, 19]}
