"""Checkpoint diagnostics, the local half of ``remote/ckpt.py``: "are my checkpoints corrupt?"

Four questions, one step each on the target (the data never leaves it):

- :func:`scan_checkpoints` (``ckpt-scan``): exact NaN / +Inf / -Inf counts per checkpoint, in
  model weights and in optimizer state, for a file, a directory or a glob;
- :func:`inspect_checkpoint` (``ckpt-inspect``): keys, dtypes, shapes, step, optimizer
  hyperparameters, without reading tensor data;
- :func:`diff_checkpoints` (``ckpt-diff``): per-tensor relative change between two checkpoints,
  and the values that became non-finite (or a negative second moment) on the way;
- :func:`bisect_checkpoints` (``ckpt-bisect``): the last clean and the first bad checkpoint of
  a run, ordered by global step.

Each returns frozen reports with an ``exit_code``: 0 all clean, 1 findings (non-finite values),
2 something could not be read (see :mod:`remotekit.diagnostics.base`), and a ``render_*``
function turns each into text; :func:`run_demo` (``demo``) plants known faults and checks that
the scan finds them. The ``remotekit`` tasks (remotekit/cli/) print these, as JSON too, and
exit with the code. The API functions raise the engine's :class:`~remotekit.RemotekitError` s, and
:class:`CheckpointError` when the script there could not run at all (no torch, a path that
does not exist, a bad ``--allow-global``).

Safety: checkpoints are loaded with ``weights_only=True`` there, so a file cannot run code.
``allow_globals`` allow-lists named globals (their modules are imported, nothing else);
``unsafe_pickle=True`` loads plain pickle, which runs whatever the file holds.

This package does not import torch: only the script that runs there does. One module a
command: :mod:`.scan`, :mod:`.inspect`, :mod:`.diff`, :mod:`.bisect`, :mod:`.demo`; what
they share (the script, its error, the safety flags, numbers in words): :mod:`.common`.

>>> reports = scan_checkpoints(target, "/workspace/checkpoints", jobs=4)
>>> reports.exit_code, [(r.path, r.status, r.nan_weights) for r in reports]
(1, [('/workspace/checkpoints/step_1000/checkpoint.pt', 'clean', 0),
     ('/workspace/checkpoints/step_2000/checkpoint.pt', 'bad', 3)])
"""

from __future__ import annotations

from remotekit.diagnostics.checkpoints.bisect import (
    BisectPoint,
    BisectReport,
    bisect_checkpoints,
    render_bisect,
)
from remotekit.diagnostics.checkpoints.common import CheckpointError
from remotekit.diagnostics.checkpoints.demo import (
    DemoReport,
    Sample,
    make_samples,
    render_demo,
    run_demo,
)
from remotekit.diagnostics.checkpoints.diff import (
    DiffFlag,
    DiffReport,
    NonWeightChange,
    NonWeightDiff,
    TensorChange,
    TensorDiff,
    diff_checkpoints,
    render_diff,
)
from remotekit.diagnostics.checkpoints.inspect import (
    InspectReport,
    OptimizerInfo,
    ParamGroup,
    ResumeCheck,
    TensorInfo,
    inspect_checkpoint,
    render_inspect,
)
from remotekit.diagnostics.checkpoints.scan import BAR_WIDTH as BAR_WIDTH
from remotekit.diagnostics.checkpoints.scan import PROGRESS_MAX as PROGRESS_MAX
from remotekit.diagnostics.checkpoints.scan import (
    BadTensor,
    CheckpointReport,
    CheckpointScan,
    LogFile,
    ScanPlan,
    ScanProgress,
    progress_line,
    render_scan,
    scan_checkpoints,
    scan_exit_code,
)
from remotekit.diagnostics.checkpoints.scan import ProgressCallback as ProgressCallback
from remotekit.diagnostics.checkpoints.scan import ReportCallback as ReportCallback

__all__ = [
    "BadTensor",
    "BisectPoint",
    "BisectReport",
    "CheckpointError",
    "CheckpointReport",
    "CheckpointScan",
    "DemoReport",
    "DiffFlag",
    "DiffReport",
    "InspectReport",
    "LogFile",
    "NonWeightChange",
    "NonWeightDiff",
    "OptimizerInfo",
    "ParamGroup",
    "ResumeCheck",
    "Sample",
    "ScanPlan",
    "ScanProgress",
    "TensorChange",
    "TensorDiff",
    "TensorInfo",
    "bisect_checkpoints",
    "diff_checkpoints",
    "inspect_checkpoint",
    "make_samples",
    "progress_line",
    "render_bisect",
    "render_demo",
    "render_diff",
    "render_inspect",
    "render_scan",
    "run_demo",
    "scan_checkpoints",
    "scan_exit_code",
]
