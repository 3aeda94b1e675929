"""The checkpoint diagnostics' modules, shipped as a package beside ``ckpt.py`` (see its
docstring for the commands, the records and the order the modules import each other in).

Runs *there*: the standard library and torch only (NumPy where it imports: ``values``),
Python >= 3.8; the modules import each other relatively and ``protocol`` / ``infile`` as the
top-level siblings of ``ckpt.py``.
"""
