"""What ``gpulayers.py`` (beside this package) sends: ``records.py``, the ``layer`` record and
those nested in it, read by the local side (:mod:`remotekit.diagnostics.gpulayers`) with the
same classes. The probe itself is the one file ``gpulayers.py``; it writes its dicts.

Runs *there*: the standard library only, Python >= 3.8.
"""
