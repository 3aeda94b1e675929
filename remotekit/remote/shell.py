# remotekit shell, stage two: shipped over the terminal and run THERE by the constant
# SHELL_LOADER (remotekit/shell.py), e.g.
#
#   pct exec 200 -- /root/venv/bin/python -c '<SHELL_LOADER>'
#
# Standard library only; Python >= 3.6 syntax. The loader has put the terminal (stdin) in raw
# mode with echo off, said REMOTEKIT-SHELL-READY on stdout (no newline), answered our probes
# until the whole chain of terminals proved raw (remotekit/shell.py), read this file as a blob
# (``<decimal length>:<base64>``) and run it with ``saved`` (the terminal's settings before,
# or None when stdin is not a terminal) and ``blob`` (reads the next blob) in its globals.
# The next blob is the request, UTF-8 JSON:
#
#   {"argv": [...] | null, "env": {...}, "path_prepend": [...], "cwd": str | null}
#
# So no env value ever shows on a command line or in the process table, and nothing the
# caller sent is echoed back. Then the terminal's settings are restored and the program is
# exec'd in place of this Python: its exit status is the session's. argv null means the
# account's login shell there (its passwd entry; else bash, else sh), as an interactive
# shell. Exit 127 / 126 when the program is not found / cannot run, 1 for a bad workdir.
import json
import os
import pwd
import sys
import termios

#: bash reads this instead of ~/.bashrc: the user's rc first, then the venv first on PATH
#: again (an rc that puts pyenv shims or ~/.local/bin first would hide the venv's python).
BASHRC = (
    b'if [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi\n'
    b'if [ -n "$REMOTEKIT_PATH_PREPEND" ]; then PATH="$REMOTEKIT_PATH_PREPEND:$PATH"; fi\n'
    b"unset REMOTEKIT_PATH_PREPEND\n"
)


def fail(message, code):
    sys.stderr.write("remotekit shell: %s\r\n" % message)
    sys.stderr.flush()
    os._exit(code)


def account():
    try:
        return pwd.getpwuid(os.getuid())
    except KeyError:
        return None


def login_shell(pw):
    for cand in (pw.pw_shell if pw else "", "/bin/bash", "/bin/sh"):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    fail("no shell found there (tried the passwd entry, /bin/bash, /bin/sh)", 127)


def environment(request, pw):
    env = dict(os.environ)
    env.update(request.get("env") or {})
    prepend = request.get("path_prepend") or []
    if prepend:
        env["PATH"] = os.pathsep.join(prepend + [env.get("PATH") or os.defpath])
    if pw is not None:
        # what login(1) sets; a container entered with a cleared env has none of them
        env.setdefault("HOME", pw.pw_dir)
        env.setdefault("USER", pw.pw_name)
        env.setdefault("LOGNAME", pw.pw_name)
    return env


def bash_rcfile(argv, env, prepend):
    """For a plain interactive bash: an rc file (a pipe) that re-applies the venv after ~/.bashrc."""
    if len(argv) != 1 or os.path.basename(argv[0]) != "bash" or not prepend:
        return argv
    r, w = os.pipe()
    os.write(w, BASHRC)  # far below a pipe's capacity
    os.close(w)
    os.set_inheritable(r, True)
    env["REMOTEKIT_PATH_PREPEND"] = os.pathsep.join(prepend)
    return [argv[0], "--rcfile", "/dev/fd/%d" % r]


def main(saved, blob):
    request = json.loads(blob().decode("utf-8"))
    if saved is not None:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
    pw = account()
    env = environment(request, pw)
    argv = request.get("argv") or [login_shell(pw)]
    if not request.get("argv"):
        env["SHELL"] = argv[0]
        argv = bash_rcfile(argv, env, request.get("path_prepend") or [])
    cwd = request.get("cwd") or env.get("HOME")
    try:
        if cwd:
            os.chdir(cwd)
    except OSError as e:
        if request.get("cwd"):
            fail("cannot change to working directory %s: %s" % (cwd, e.strerror), 1)
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        fail("command not found: %s" % argv[0], 127)
    except OSError as e:
        fail("cannot run %s: %s" % (argv[0], e.strerror), 126)


if __name__ == "__main__":
    main(saved, blob)  # noqa: F821 (the loader's globals)
