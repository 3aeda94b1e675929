"""hosts.yaml written by an attacker or a careless user: every case is an InventoryError that
names the file, the line and the key, within a bounded time and memory; nothing that loads
crashes later at run time."""

from __future__ import annotations

import contextlib
import os
import tracemalloc
from pathlib import Path

import pytest

import remotekit
from tests.conftest import need_program
from tests.harness import ROOT

pytestmark = pytest.mark.timeout(30)


def load(tmp_path: Path, text: str) -> remotekit.Inventory:
    p = tmp_path / "hosts.yaml"
    p.write_text(text)
    return remotekit.load_inventory(p)


def bad(tmp_path: Path, text: str, line: int, key: str | None, words: str) -> str:
    with pytest.raises(remotekit.InventoryError) as info:
        load(tmp_path, text)
    e = info.value
    msg = str(e)
    assert msg.startswith(f"{tmp_path / 'hosts.yaml'}:{line}: "), msg
    assert (e.line, e.key) == (line, key), msg
    assert words in msg
    return msg


# -- aliases --------------------------------------------------------------------------------


def billion_laughs(levels: int = 9) -> str:
    lines = ["hosts:", "  h:", "    env:", "      a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]"]
    for prev, name in zip("abcdefghijk", "bcdefghijkl"[: levels - 1]):
        lines.append(f"      {name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_at_the_alias_with_bounded_memory(tmp_path: Path) -> None:
    text = billion_laughs()
    assert len(text) < 400  # 9**9 values once expanded
    tracemalloc.start()
    try:
        msg = bad(tmp_path, text, 8, "hosts.h.env.e.1", "alias *d")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "alias bomb" in msg
    assert peak < 16 * 2**20


def test_aliases_and_merge_keys_for_a_real_fleet_stay_within_the_bound(tmp_path: Path) -> None:
    base = "hosts:\n  base: &base\n    venv: /v\n    env: {A: '1', B: '2'}\n    workdir: /w\n"
    hosts = "".join(f"  gpu{i:03}:\n    <<: *base\n    workdir: /w{i}\n" for i in range(300))
    inv = load(tmp_path, base + hosts)
    assert len(inv.hosts) == 302
    assert inv.spec("gpu299").env == {"A": "1", "B": "2"} and inv.spec("gpu299").workdir == "/w299"


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("hosts: &a\n  h: *a\n", 2, "hosts.h"),
        ("hosts:\n  h: &a\n    env: *a\n", 3, "hosts.h.env"),
        ("hosts:\n  h:\n    secret_env: &a [A, [B, *a]]\n", 3, "hosts.h.secret_env.1.1"),
        ("hosts:\n  h: &a\n    <<: *a\n", 3, "hosts.h.<<"),
    ],
)
def test_recursive_alias_is_refused(tmp_path: Path, text: str, line: int, key: str) -> None:
    bad(tmp_path, text, line, key, "recursive alias *a")


def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    bad(
        tmp_path,
        "hosts:\n  h:\n    env: " + "[" * 5000 + "]" * 5000 + "\n",
        3,
        "hosts.h.env",
        "levels deep",
    )
    block = "hosts:\n  h:\n    env:\n" + "".join(f"{' ' * (6 + 2 * i)}k{i}:\n" for i in range(600))
    bad(tmp_path, block, 33, "hosts.h.env", "levels deep")


def test_aliases_cannot_nest_past_the_bound(tmp_path: Path) -> None:
    lines = ["hosts:", "  h:", "    env:", "      a0: &a0 [x]"]
    lines += [f"      a{i}: &a{i} [*a{i - 1}]" for i in range(1, 60)]
    msg = bad(tmp_path, "\n".join(lines) + "\n", 33, "hosts.h.env.a29.0", "alias *a28")
    assert "levels deep" in msg


def test_chained_merge_keys_cannot_nest_past_the_bound(tmp_path: Path) -> None:
    # Each host merges the one before: no key levels added, but 40 aliases deep.
    text = "hosts:\n  h0: &a0 {venv: /v}\n"
    text += "".join(f"  h{i}: &a{i}\n    <<: *a{i - 1}\n" for i in range(1, 40))
    msg = bad(tmp_path, text, 68, "hosts.h33", "alias *a32")
    assert "levels deep" in msg
    three = "hosts:\n  h0: &a0 {venv: /v}\n  h1: &a1 {<<: *a0}\n  h2: {<<: *a1, workdir: /w}\n"
    assert load(tmp_path, three).spec("h2").venv == "/v"


# -- tags and values ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "tag"),
    [
        ("!!python/name:os.system", "!!python/name:os.system"),
        ("!!python/object/apply:os.system [touch /tmp/pwned]", "!!python/object/apply:os.system"),
        ("!foo bar", "!foo"),
        ("!foo {a: 1}", "!foo"),
        ("!!binary aGk=", "!!binary"),
        ("!!set {a, b}", "!!set"),
    ],
)
def test_tags_are_refused(tmp_path: Path, value: str, tag: str) -> None:
    bad(tmp_path, f"hosts:\n  h:\n    venv: {value}\n", 3, "hosts.h.venv", f"tag {tag} is not")


def test_a_tag_on_a_key_or_a_host_is_refused(tmp_path: Path) -> None:
    bad(tmp_path, "hosts:\n  h:\n    !!python/name:os.system : 1\n", 3, "hosts.h", "tag !!python")
    bad(tmp_path, "hosts:\n  h: !!omap [{venv: /v}]\n", 2, "hosts.h", "tag !!omap")


def test_plain_explicit_tags_still_work(tmp_path: Path) -> None:
    s = load(tmp_path, "hosts:\n  h:\n    venv: !!str /v\n    env: {N: !!str 012}\n").spec("h")
    assert s.venv == "/v" and s.env == {"N": "012"}


@pytest.mark.parametrize(
    "value", ["9" * 5000, "2026-02-30"], ids=["5000-digit int", "impossible date"]
)
def test_unreadable_values_are_inventory_errors(tmp_path: Path, value: str) -> None:
    bad(tmp_path, f"hosts:\n  h:\n    env: {{A: {value}}}\n", 3, "hosts.h.env.A", "cannot read")


@pytest.mark.parametrize("key", ["connect", "step", "kill_grace"])
@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", "1.0e+308", "1" + "0" * 400, "0"])
def test_timeouts_must_be_finite_positive_and_sane(tmp_path: Path, key: str, value: str) -> None:
    bad(
        tmp_path,
        f"hosts:\n  h:\n    timeouts:\n      {key}: {value}\n",
        4,
        f"hosts.h.timeouts.{key}",
        "expected seconds > 0 and <=",
    )


def test_timeouts_in_defaults_are_checked_where_written(tmp_path: Path) -> None:
    bad(
        tmp_path,
        "defaults:\n  timeouts: {step: .inf}\nhosts:\n  h: {}\n",
        2,
        "defaults.timeouts.step",
        "got inf",
    )


def test_timeouts_at_the_bounds_load(tmp_path: Path) -> None:
    text = "hosts:\n  h:\n    timeouts: {connect: 3600, step: 2592000, kill_grace: 0.001}\n"
    assert load(tmp_path, text).spec("h").timeouts.step == 2592000
    assert load(tmp_path, "hosts:\n  h: {timeouts: {step: null}}\n").spec("h").timeouts.step is None


@pytest.mark.parametrize(
    ("snippet", "key"),
    [
        ('env: {A: "x\\0y"}', "hosts.h.env.A"),
        ('venv: "/v\\0"', "hosts.h.venv"),
        ('secret_env: ["A\\0"]', "hosts.h.secret_env.0"),
    ],
)
def test_nul_characters_are_refused_at_load_time(tmp_path: Path, snippet: str, key: str) -> None:
    bad(tmp_path, f"hosts:\n  h:\n    {snippet}\n", 3, key, "NUL character")


# -- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "a,b", " a", "a b", "-x", ".x", "a\tb", "x\u202ey", "h" * 65, "group:gpu", "a/b"]
)
def test_host_names_that_break_selection_or_display_are_refused(tmp_path: Path, name: str) -> None:
    quoted = '"' + name.replace("\t", "\\t") + '"'
    bad(tmp_path, f"hosts:\n  ok: {{}}\n  {quoted}: {{}}\n", 3, f"hosts.{name}", "host name")
    text = f"hosts:\n  ok: {{}}\ngroups:\n  {quoted}: [ok]\n"
    bad(tmp_path, text, 4, f"groups.{name}", "group name")


def test_usual_host_names_load(tmp_path: Path) -> None:
    names = ["kpro6", "gpu_01.lab-a", "H100", "_x", "200"]
    inv = load(tmp_path, "hosts:\n" + "".join(f"  {n}: {{}}\n" for n in names))
    assert list(inv.hosts) == ["local", *names]
    assert [h.name for h in inv.select(hosts="kpro6,200")] == ["kpro6", "200"]


# -- merge keys -----------------------------------------------------------------------------

MERGED = """\
defaults:
  <<: {sudo: true}
hosts:
  base: &base
    venv: /v
    workdir: /w
    env: {A: '1'}
  extra: &extra
    workdir: /x
    python: python3.11
  a:
    <<: *base
    workdir: /own
  b:
    <<: [*extra, *base]
"""


def test_merge_keys_merge(tmp_path: Path) -> None:
    inv = load(tmp_path, MERGED)
    a, b = inv.spec("a"), inv.spec("b")
    assert (a.venv, a.workdir, dict(a.env), a.sudo) == ("/v", "/own", {"A": "1"}, True)
    # In a list of sources the earlier one wins.
    assert (b.venv, b.workdir, b.python) == ("/v", "/x", "python3.11")
    assert a.source.endswith("hosts.yaml:11")


def test_a_bad_merged_value_is_reported_where_it_is_written(tmp_path: Path) -> None:
    text = "hosts:\n  a: &base\n    sudo: true\n  b:\n    <<: *base\n    sudo: maybe\n"
    bad(tmp_path, text, 6, "hosts.b.sudo", "true or false")
    text = "hosts:\n  b:\n    <<: {sudo: maybe}\n    venv: /v\n"
    bad(tmp_path, text, 3, "hosts.b.sudo", "true or false")
    text = "hosts:\n  b:\n    <<: {bogus: 1}\n"
    bad(tmp_path, text, 3, "hosts.b.bogus", "unknown key")


def test_merging_a_scalar_is_refused(tmp_path: Path) -> None:
    bad(tmp_path, "hosts:\n  b:\n    <<: 3\n", 3, "hosts.b.<<", "`<<` merges a mapping")


# -- secrets in messages --------------------------------------------------------------------

SECRET = "hf_SeCrEt0123456789"


@pytest.mark.parametrize(
    "value",
    [f"[{SECRET}]", f"{{a: {SECRET}}}", f"[[{SECRET}, 42]]"],
)
def test_a_malformed_secret_env_value_is_never_quoted(tmp_path: Path, value: str) -> None:
    text = f"hosts:\n  h:\n    secret_env: [HF_TOKEN]\n    env:\n      HF_TOKEN: {value}\n"
    msg = bad(tmp_path, text, 5, "hosts.h.env.HF_TOKEN", "expected a string, number or boolean")
    assert SECRET not in msg, msg


def test_a_secret_is_masked_in_every_error_of_its_host(tmp_path: Path) -> None:
    # The secret in defaults, the mistake elsewhere quoting the same text.
    text = (
        "defaults:\n  secret_env: [HF_TOKEN]\n  env: {HF_TOKEN: " + SECRET + "}\n"
        "hosts:\n  h:\n    venv: [" + SECRET + "]\n"
    )
    msg = bad(tmp_path, text, 6, "hosts.h.venv", "expected a non-empty string")
    assert SECRET not in msg and "***" in msg, msg


def test_a_malformed_plain_env_value_is_quoted(tmp_path: Path) -> None:
    msg = bad(
        tmp_path, "hosts:\n  h:\n    env: {A: [1, 2]}\n", 3, "hosts.h.env.A", "got list [1, 2]"
    )
    assert "[1, 2]" in msg


# -- who may write hosts.yaml ---------------------------------------------------------------


def _shared_gid() -> int:
    """A group that is not the owner's private one (root's own group is private to root)."""
    import grp

    for name in ("users", "nogroup", "daemon", "bin"):
        with contextlib.suppress(KeyError):
            g = grp.getgrnam(name)
            if g.gr_gid != os.getgid():
                return g.gr_gid
    pytest.skip("no group other than our own")


@pytest.mark.parametrize("mode", [0o666, 0o646, 0o602])
def test_a_hosts_yaml_everyone_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    p = tmp_path / "hosts.yaml"
    p.write_text("hosts:\n  h: {}\n")
    p.chmod(mode)
    with pytest.raises(remotekit.InventoryError) as info:
        remotekit.load_inventory(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: mode {mode:04o} lets everyone write it"), msg
    assert f"chmod go-w {p}" in msg


def test_a_hosts_yaml_a_shared_group_can_write_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "hosts.yaml"
    p.write_text("hosts:\n  h: {}\n")
    os.chown(p, -1, _shared_gid())
    p.chmod(0o664)
    with pytest.raises(remotekit.InventoryError, match="lets its group write it"):
        remotekit.load_inventory(p)
    p.chmod(0o644)  # readable by all is fine: it names hosts
    assert "h" in remotekit.load_inventory(p).hosts


def test_a_group_writable_hosts_yaml_of_a_private_group_loads(tmp_path: Path) -> None:
    # What a clone under umask 002 gives where each user has their own group (as Debian's
    # OpenSSH allows for ~/.ssh/config): the group is the owner alone.
    import grp
    import pwd

    me = pwd.getpwuid(os.getuid())
    if set(grp.getgrgid(me.pw_gid).gr_mem) - {me.pw_name}:
        pytest.skip("our primary group has other members")
    p = tmp_path / "hosts.yaml"
    p.write_text("hosts:\n  h: {}\n")
    os.chown(p, -1, me.pw_gid)
    p.chmod(0o664)
    assert "h" in remotekit.load_inventory(p).hosts


def test_the_repository_hosts_yaml_loads_from_a_fresh_clone(tmp_path: Path) -> None:
    import subprocess

    clone = tmp_path / "clone"
    subprocess.run(
        [
            "sh",
            "-c",
            'umask 002 && "$0" clone -q --no-hardlinks "$1" "$2"',
            need_program("git"),
            ROOT,
            clone,
        ],
        check=True,
        timeout=60,
    )
    assert "local" in remotekit.load_inventory(clone / "hosts.yaml").hosts
