"""``python -m remotekit``: the ``remotekit`` command."""

from __future__ import annotations

from remotekit.cli.main import main

if __name__ == "__main__":
    main()
