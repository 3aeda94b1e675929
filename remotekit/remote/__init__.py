"""The code that runs *there*, inside the container, with its Python: one package, both sides.

Everything under ``remotekit/remote/`` runs there (standard library, and torch where a
diagnostic needs it; Python >= 3.8, the runner, the agent and its boot >= 3.6) and is an
ordinary package *here*: the laptop imports the very modules the far side runs, so what
crosses the boundary is written once (the record format of :mod:`.protocol`, the step
header and control words of :mod:`.runner`, the agent's frames, train-log's presets).

How it gets there (:mod:`remotekit.shipping`, the laptop's half, holds the code): as mitogen
ships ``mitogen.core`` by its source, remotekit ships this package whole, as it is here,
named by the hash of its files, and the runner keeps it in a folder of its own cache there
(``$XDG_CACHE_HOME/remotekit/pkg/<hash>/remotekit/remote/...``, else under ``~/.cache``; 0700,
ours alone), where Python keeps its bytecode beside it. A step that runs a diagnostic names
the hash in its header and sends nothing else: only when the runner does not have that
package does it say so (``missing``) before anything ran, and the step is sent once more
with the package behind its header. Where no such cache can be (a read-only home) the
package lands in the step's private temp dir, and travels with every step.

Modules import each other relatively (``from ..protocol import emit``). The files a step
runs (the entry points: ``trainlog.py``, ``ckpt.py``, ``ckpt_samples.py``, ``sysinfo.py``,
``gpulayers.py``, ``supervisor.py``) run as files, there and in tests (``python
remote/ckpt.py scan DIR``): each first makes its package importable by name, as a bare
``remotekit`` module over the folder it sits in unless a ``remotekit`` is imported already
(the laptop's own, in an in-process test), so the laptop's ``remotekit/__init__`` (and what
it imports) never runs there, then imports ``remotekit.remote.*`` absolutely.

The runner (``runner.py``), the agent (``agent.py``) and its boot (``boot.py``), the relay
(``relay.py``) and the shell (``shell.py``) travel alone, as source on a loader's stdin, and
import nothing of this package; ``sync.py`` runs alone beside the files it syncs, and
``call.py`` at the root of a call's bundle, beside the caller's modules (remotekit.call).
"""
