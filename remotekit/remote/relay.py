# remotekit relay: shipped over stdin and run THERE by the constant loader (layers.core.LOADER),
# through the target's hops like any step, e.g.
#
#   pct exec 200 -- /root/venv/bin/python -c 'import sys;exec(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())))'
#
# It joins one forwarded connection to a TCP port in the target's own network namespace, so a
# port inside a container with no route from outside can be reached over the SSH connection
# (one exec channel per forwarded connection, as `kubectl port-forward` does over its API).
# Standard library only; Python >= 3.8. Protocol (stdin, after the relay itself):
#
#   {"hosts": ["127.0.0.1", "::1"], "port": 6006, "nonce": N}\n   (JSON, one line)
#
# It connects to the first of "hosts" that accepts (a server bound to "localhost" may listen on
# ::1 only), then writes the line "<N>\n" on stdout (what a login shell printed before it is
# not the stream: the caller drops it). Only after that line does the caller send the stream,
# so nothing of it sits in the loader's stdin buffer: from then on stdin and stdout are the raw
# byte stream, copied to and from the socket as it comes.
# EOF on stdin (the caller closed the connection or the channel) or on the socket closes both,
# and the relay exits: nothing is left running there.
# Exit status: 0 the stream ended; 3 the connection was refused / failed (one line on stderr,
# starting with PREFIX); 2 bad request line.
import json
import os
import socket
import sys
import threading

PREFIX = "remotekit-relay:"
EXIT_CONNECT = 3
EXIT_USAGE = 2
CHUNK = 1 << 18


def fail(code, message):
    os.write(2, ("%s %s\n" % (PREFIX, message)).encode())
    sys.exit(code)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def upstream(sock):
    """stdin -> socket; at EOF shut the socket, which ends the other direction too."""
    try:
        while True:
            data = os.read(0, CHUNK)
            if not data:
                break
            sock.sendall(data)
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def downstream(sock):
    """socket -> stdout, until the far side or ``upstream`` ends the socket."""
    try:
        while True:
            data = sock.recv(CHUNK)
            if not data:
                return
            write_all(1, data)
    except OSError:
        pass


def connect(hosts, port):
    """(socket, None) for the first host that accepts, else (None, the first host's error)."""
    first = None
    for host in hosts:
        try:
            return socket.create_connection((host, port), timeout=10), None
        except OSError as exc:
            first = first or exc.strerror or str(exc)
    return None, first


def main():
    try:
        request = json.loads(sys.stdin.buffer.readline().decode())
        hosts, port = [str(h) for h in request["hosts"]], int(request["port"])
        ready = (str(request["nonce"]) + "\n").encode()
    except (ValueError, KeyError, TypeError) as exc:
        fail(EXIT_USAGE, "bad request line: %s" % exc)
    sock, first = connect(hosts, port)
    if sock is None:
        fail(EXIT_CONNECT, "cannot connect to %s:%d: %s" % (hosts[0], port, first))
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        write_all(1, ready)
    except OSError:
        os._exit(0)  # the caller is already gone
    # Two threads, not one select loop: a blocked send one way must never stop the other way.
    threading.Thread(target=upstream, args=(sock,), daemon=True).start()
    downstream(sock)
    # Exit at once: the upstream thread may still sit in a read of stdin.
    os._exit(0)


if __name__ == "__main__":
    main()
