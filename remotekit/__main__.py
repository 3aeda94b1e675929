"""``python -m remotekit``: the ``remotekit`` command."""

from remotekit.cli.main import main

main()
