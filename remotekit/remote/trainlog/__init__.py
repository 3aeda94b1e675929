"""The train-log analysis' modules, shipped as a package beside ``trainlog.py`` (see its
docstring for the arguments, the records and the order the modules import each other in).

Runs *there*: the standard library only, Python >= 3.8; the modules import each other
relatively and ``protocol`` / ``infile`` as the top-level siblings of ``trainlog.py``.
"""
