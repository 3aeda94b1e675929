# remotekit call: runs THERE one function the laptop named, and writes what came of it on the
# value pipe the runner gave it ($REMOTEKIT_VALUE_FD), apart from the function's own output.
#
# It travels alone (remotekit.call ships it as the entry point of a call's bundle, at the
# bundle's root, beside the caller's modules it ships: so they import as they do there), and
# imports nothing of remotekit. Standard library only; Python >= 3.8.
#
# Its request is $REMOTEKIT_DIR/call.json (ORDER): {"module", "qualname", "pickle", "args",
# "kwargs"} (with "pickle": base64 of pickle.dumps((args, kwargs)) in "args"). What it writes,
# one JSON object (ENVELOPE below): {"ok": true, "json": V} or {"ok": true, "pickle": B64},
# or {"ok": false, "type", "message", "traceback"}. The laptop reads it with bounds, and
# loads a pickle only where its caller asked for pickle.
import json
import os
import sys

# (traceback, base64 and pickle are imported where needed: ~5 ms a call that needs none)

#: The most characters of an exception's message and traceback written back (the rest cut).
MAX_TEXT = 64 * 1024
#: The variable naming the value pipe's write end (the runner's VALUE_FD: a test holds them
#: equal), and the name of the call's order in $REMOTEKIT_DIR (remotekit.call writes it).
VALUE_FD = "REMOTEKIT_VALUE_FD"
ORDER = "call.json"


def find(module, qualname):
    """The function ``qualname`` of ``module``, imported as the far side's Python imports it
    (the shipped modules sit first on the path: this file's folder)."""
    __import__(module)
    obj = sys.modules[module]
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def error(exc, tb=None):
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    return {
        "ok": False,
        "type": type(exc).__module__ + "." + type(exc).__qualname__,
        "message": str(exc)[:MAX_TEXT],
        "traceback": text[-MAX_TEXT:],
    }


def encode(value, use_pickle):
    if use_pickle:
        import base64
        import pickle

        return {"ok": True, "pickle": base64.b64encode(pickle.dumps(value)).decode("ascii")}
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        return {
            "ok": False,
            "type": "TypeError",
            "message": "the function returned a value that is not JSON (%s): %s; return "
            "plain data (dict, list, str, int, float, bool, None), or call with pickle=True"
            % (type(value).__name__, exc),
            "traceback": "",
        }
    except RecursionError:
        return {
            "ok": False,
            "type": "RecursionError",
            "message": "the function returned a value nested too deep for JSON (%s)"
            % type(value).__name__,
            "traceback": "",
        }
    return {"ok": True, "json": value}


def call(request):
    fn = find(request["module"], request["qualname"])
    if request["pickle"]:
        import base64
        import pickle

        args, kwargs = pickle.loads(base64.b64decode(request["args"]))
    else:
        args, kwargs = request["args"], request["kwargs"]
    return encode(fn(*args, **kwargs), request["pickle"])


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main():
    """A call in a process of its own: the order in $REMOTEKIT_DIR, the value pipe's fd in
    $REMOTEKIT_VALUE_FD."""
    fd = int(os.environ.pop(VALUE_FD))
    os.set_inheritable(fd, False)  # what the function starts does not get it
    return run(os.environ["REMOTEKIT_DIR"], fd)


def run(folder, fd, order=None):
    """One call: its order ``folder``/ORDER (or ``order``, its text, where a warm worker
    had it in memory), what came of it written on ``fd`` (then closed). Returns its exit
    status: 0, or 1 when the function raised. A warm worker's Executor (the runner's) calls
    it for each call, this module loaded once."""
    if order is None:
        with open(os.path.join(folder, ORDER), "rb") as f:
            order = f.read().decode("utf-8")
    request = json.loads(order)
    try:
        envelope = call(request)
    except Exception as exc:  # the function's, or its import's: it goes back as data
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # the frames of this file are not the caller's business
        envelope = error(exc, tb)
    sys.stdout.flush()
    sys.stderr.flush()
    write_all(fd, json.dumps(envelope).encode("utf-8"))
    os.close(fd)
    return 0 if envelope["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
