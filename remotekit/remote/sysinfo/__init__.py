"""The sysinfo commands' modules, shipped as a package beside ``sysinfo.py`` (its docstring
has the arguments and the records; it reads the command line and imports only the module of
the command asked, so ``disk`` pays for none of what the others import)::

    gpu.py        gpu: each GPU, its compute apps, what torch sees; heat, ECC, throttling
    env.py        env: Python, host, kernel, CPUs, memory, container, torch and its CVEs
    disk.py       disk: filesystems, a bounded walk, the largest files and checkpoints
    procs.py      procs: Python and GPU-holding processes, their command lines masked

    smi.py        what gpu and procs share: nvidia-smi's queries and their reading
    torchview.py  what gpu and env share: the "torch" record
    base.py       what every command may use: a file's text, a tool's bounded output

The modules import each other relatively (``..protocol`` for the records' writer); nothing
here imports ``sysinfo.py``. ``remote/gpulayers.py`` uses ``smi``, ``torchview`` and ``base``
too. Runs *there*: the standard library, optional torch, Python >= 3.8.
"""
