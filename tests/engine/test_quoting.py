"""The one quoting point: every POSIX login shell must split the string back exactly."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remotekit
from remotekit.quoting import join, quote
from tests.conftest import need_program

SHELLS = ["sh", "bash", "dash", "zsh"]
# Any text a POSIX argv can hold: everything but NUL (surrogates cannot be encoded).
ARG = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
TRICKY = [
    "",
    "'",
    "''",
    "'\\''",
    '"',
    "$HOME",
    "`id`",
    "$(id)",
    "{a,b}",
    "*",
    "~",
    "!",
    "\\",
    "\n",
    "a b",
    "é中🙂",
    "PYEOF",
    "-n",
    "--",
]


shell = need_program


def roundtrip(sh: str, argv: list[str], *opts: str) -> list[str]:
    script = "printf '%s\\0' " + join(argv) if argv else "true"
    res = subprocess.run([sh, *opts, "-c", script], capture_output=True, check=True)
    return [p.decode("utf-8") for p in res.stdout.split(b"\0")[:-1]]


@pytest.mark.parametrize("name", SHELLS)
def test_tricky_words_survive_every_shell(name: str) -> None:
    sh = shell(name)
    assert roundtrip(sh, TRICKY) == TRICKY


def test_zsh_rc_quotes_does_not_change_the_words() -> None:
    sh = shell("zsh")
    argv = ["a''b", "'", "x'y'z", ""]
    assert roundtrip(sh, argv, "-o", "rcquotes") == argv


@pytest.mark.parametrize("name", SHELLS)
@settings(max_examples=60, deadline=None)
@given(argv=st.lists(ARG, min_size=1, max_size=6))
def test_random_argv_roundtrips(name: str, argv: list[str]) -> None:
    assert roundtrip(shell(name), argv) == argv


def test_safe_words_are_left_bare() -> None:
    assert quote("/root/venv/bin/python") == "/root/venv/bin/python"
    assert quote("a b") == "'a b'"
    assert quote("it's") == "'it'\\''s'"
    with pytest.raises(ValueError, match="NUL"):
        quote("a\x00b")


@settings(max_examples=40, deadline=None)
@given(argv=st.lists(ARG, max_size=5), value=ARG)
def test_argv_and_env_roundtrip_through_the_runner(argv: list[str], value: str) -> None:
    # Locally: the same runner and payload path as over SSH (the SSH hop adds only join()).
    with remotekit.local_target() as t:
        code = "import json, os, sys\nprint(json.dumps([sys.argv[1:], os.environ['V']]))\n"
        r = t.run_python(remotekit.Script(code), args=argv, env={"V": value})
    import json

    assert json.loads(r.stdout) == [argv, value]
