"""GPU, environment, disk and process facts of the host it runs on, as JSON lines.

Runs *there* (standard library, optional torch, Python >= 3.8)::

    python sysinfo.py gpu   [--temp-threshold 85] [--nvidia-smi PATH] [--smi-timeout 20]
    python sysinfo.py env
    python sysinfo.py disk  [--min-free-pct 10] [--top 10] [--max-entries N] PATH [PATH ...]
    python sysinfo.py procs [--all] [--nvidia-smi PATH] [--smi-timeout 20]

Every stdout line is one JSON object with a ``"type"``; nothing else is written to stdout.
Records common to all commands:

    {"type": "warning", "code": ..., "message": ...}   a finding (exit 1)
    {"type": "error",   "code": ..., "message": ...}   the check could not run (exit 2)
    {"type": "note",    "code": ..., "message": ...}   context, not a problem
    {"type": "done", "command": ..., "exit_code": 0|1|2, "warnings": n, "errors": n}   last

gpu:   "smi" (path, throttle_field), "gpu" (one per GPU), "gpu_process" (one per compute app;
       ``visible`` says whether its pid is in this process table), "torch".
env:   "env" (python, host, kernel, CPUs, memory, CUDA_VISIBLE_DEVICES, container), "torch".
disk:  "fs" (one per path), "walk" (one per walked path), "file" (largest files, biggest
       first), "checkpoint" (largest checkpoint per filesystem).
procs: "proc" (Python processes and processes that hold GPU memory or /dev/nvidia*;
       not this script and its ancestors, e.g. remotekit's runner), "gpu_process".

Numbers nvidia-smi reports as ``[N/A]`` (or any other ``[...]``) are ``null``. The exit code
is the ``done`` record's: 0 OK, 1 findings, 2 could not run. Command lines of other processes
have secret-looking values (``--token x``, ``PASSWORD=x``) replaced by ``***`` before they
leave the host.

This file reads the command line and runs the command; each command is a module of the
package ``sysinfo/`` beside it (its ``__init__`` draws them), imported only when asked.
"""

from __future__ import annotations

import os
import sys

# Only the asked command's module is imported (command), and in it csv, platform, shutil,
# socket and subprocess only where they are used: together ~8 ms a step, which the disk
# command, needing none, does not pay. The command line is read without argparse (parse):
# its import and parsers cost a step ~4 ms.

if not __package__:  # run as a file: its package imported by name (see remotekit.remote)
    sys.modules.setdefault("remotekit", type(sys)("remotekit")).__dict__.setdefault(
        "__path__", [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    )
from remotekit.remote.protocol import Out

#: Each command's options: ``--name`` -> (type, default); type bool is a flag. Only ``disk``
#: takes arguments (its paths, at least one).
OPTIONS = {
    "gpu": {
        "--temp-threshold": (float, 85.0),  # warn at or above (C)
        "--gpu-expected": (bool, False),  # no nvidia-smi is an error, not a note
        "--gpus": (int, 0),  # the GPUs the host has: fewer seen is a finding
        "--nvidia-smi": (str, None),  # path (default: found on PATH)
        "--smi-timeout": (float, 20.0),
    },
    "env": {},
    "disk": {
        "--min-free-pct": (float, 10.0),
        "--top": (int, 10),
        "--max-entries": (int, 200000),
        "--max-seconds": (float, 60.0),
    },
    "procs": {
        "--all": (bool, False),  # every process, not only Python/GPU ones
        "--nvidia-smi": (str, None),
        "--smi-timeout": (float, 20.0),
    },
}
USAGE = "usage: sysinfo.py {gpu,env,disk,procs} [--option VALUE]... [--] [PATH]..."


class Args(object):
    def __init__(self, fields):
        self.__dict__.update(fields)


def parse(argv):
    """``COMMAND [--option VALUE | --option=VALUE | --flag]... [--] [PATH]...``, as the
    local side writes it (OPTIONS), into an object with one attribute an option (``--top``:
    ``top``), ``command`` and ``paths``. A mistake exits 2 with the usage, as argparse's do."""
    if not argv or argv[0] not in OPTIONS:
        usage("the command is one of %s, not %r" % (", ".join(OPTIONS), argv[0] if argv else ""))
    options = OPTIONS[argv[0]]
    fields = {"command": argv[0], "paths": []}
    for name, (_, default) in options.items():
        fields[name[2:].replace("-", "_")] = default
    rest = list(argv[1:])
    while rest:
        word = rest.pop(0)
        if word == "--":
            fields["paths"] += rest
            break
        name, eq, value = word.partition("=")
        if name not in options:
            if word.startswith("-") and word != "-":
                usage("%s: unknown option %s" % (argv[0], word))
            fields["paths"].append(word)
            continue
        kind = options[name][0]
        if kind is bool:
            if eq:
                usage("%s: %s takes no value" % (argv[0], name))
            value = True
        elif not eq:
            if not rest:
                usage("%s: %s needs a value" % (argv[0], name))
            value = rest.pop(0)
        try:
            fields[name[2:].replace("-", "_")] = kind(value)
        except ValueError:
            usage("%s: %s takes a number, not %r" % (argv[0], name, value))
    if (argv[0] == "disk") != bool(fields["paths"]):
        usage("%s: %s" % (argv[0], "a path is needed" if argv[0] == "disk" else "no path is taken"))
    return Args(fields)


def usage(message):
    sys.stderr.write("%s\nsysinfo.py: error: %s\n" % (USAGE, message))
    sys.exit(2)


def command(name):
    """The function that runs the command ``name``, its module imported now (and no other)."""
    if name == "gpu":
        from remotekit.remote.sysinfo.gpu import cmd_gpu as run
    elif name == "env":
        from remotekit.remote.sysinfo.env import cmd_env as run
    elif name == "disk":
        from remotekit.remote.sysinfo.disk import cmd_disk as run
    else:
        from remotekit.remote.sysinfo.procs import cmd_procs as run
    return run


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else list(argv))
    out = Out(args.command)
    try:
        return command(args.command)(args, out)
    except BrokenPipeError:
        # the reader went away (lost connection, `| head`): there is no one left to tell
        sys.stdout = open(os.devnull, "w")  # lives until exit, on purpose
        return 2
    except Exception as exc:  # a bug here must still end in records, not a bare traceback
        import traceback

        traceback.print_exc()
        out.error(
            "internal", "sysinfo.py %s failed: %s: %s" % (args.command, type(exc).__name__, exc)
        )
        return out.done()


if __name__ == "__main__":
    sys.exit(main())
