"""Local halves of the canned diagnostics: each runs a file from :mod:`remotekit.remote`
there, parses its JSON-line records into frozen dataclasses, and renders them."""
