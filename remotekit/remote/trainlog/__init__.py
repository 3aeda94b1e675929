"""The train-log analysis' modules, shipped as a package beside ``trainlog.py`` (its
docstring has the arguments and the records), in the order of the pipeline::

    find.py, rank.py    1. find: the candidate logs of a path (a file, a run directory,
                           mlruns/, a W&B run) and which one is read, why, what else was there
    source.py           2. read: the bytes of a file (or a followed log's window) a block
    readers/               of lines at a time; one module per format, each saying which
                           files it reads (NAMES, sniff) and returning series (series.py:
                           Read); the registry in readers/__init__.py picks the reader;
                           linefmt.py and wire.py are what several readers share
    choose.py           3. choose: the step, loss, grad norm and lr columns by a scored rule
                           over names and content, every pick said with its why
    ingest.py              ... the chosen columns as compact ``array`` columns
    steps.py            4. analyse: rows per step (resumes, repeats, counters),
    spikes.py              the detector (trend and the published presets),
    events.py              saves, resumes and other events, and their correlation,
    resumes.py             a spike at a resume joined to the checkpoint resumed from,
    composition.py         modes, periodicity and batch composition;
    analyze.py             the whole-log analysis in its phases
    follow.py           5. follow: the log followed as it grows, each new incident as found

``options.py`` is what a run is asked (one frozen dataclass, imported by the local side
too, that crosses as one JSON record); ``records.py`` is what it sends back (one frozen
dataclass per record type, read by the local side with the same classes); ``base.py`` holds
what every stage shares (presets, number marks, writing a record, small statistics); ``read.py`` joins the stages up to the columns (a path in, an Ingest out). The
imports run one way, without a cycle (tests/test_architecture.py holds it).

Runs *there*: the standard library only, Python >= 3.8; the modules import each other
relatively and ``protocol`` / ``infile`` as the top-level siblings of ``trainlog.py``.
"""
