"""The ``disk`` command: each path's filesystem, a bounded walk for the largest files and
checkpoints; findings: low space or inodes, a checkpoint that would not fit again.

A fleet asks this of every host: it imports nothing beyond what it uses (no subprocess, no
regex; tests/diagnostics/system/test_sysinfo_script.py holds it).
"""

from __future__ import annotations

import heapq
import os
import stat
import time

from .base import read_text

CKPT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors", ".distcp", ".pkl")
# A save folder's name: one of these words (any case), an optional - or _, then digits.
CKPT_DIR_WORDS = ("checkpoint", "ckpt", "step", "global_step", "iter", "epoch")


def cmd_disk(args, out):
    mounts = read_mounts()
    deadline = time.monotonic() + args.max_seconds
    walker = Walk(args.top, args.max_entries, deadline)
    fs = {}  # st_dev -> {"rec": first fs record, "paths": [...], "ckpts": [(size, path, kind)]}
    walked = []
    for raw in args.paths:
        disk_path(out, raw, mounts, walker, fs, walked)
    for size, path, mtime, ckpt in sorted(walker.heap, reverse=True):
        out.emit("file", path=path, size_bytes=size, mtime=mtime, checkpoint=ckpt)
    for entry in fs.values():
        warn_filesystem(out, entry, args.min_free_pct)
    return out.done()


def disk_path(out, raw, mounts, walker, fs, walked):
    """The "fs" record of one path and, unless a walked path holds it, its "walk"."""
    path = os.path.abspath(os.path.expanduser(raw))
    rec, dev = statvfs_record(path, mounts)
    rec["path"] = raw
    out.emit("fs", **rec)
    if dev is None:
        out.error("statvfs_failed", "%s: %s" % (raw, rec.get("error")))
        return
    entry = fs.setdefault(dev, {"rec": rec, "paths": [], "ckpts": []})
    entry["paths"].append(raw)
    if not rec["exists"]:
        out.warning(
            "missing_path",
            "%s does not exist (checked %s, its nearest existing parent)" % (raw, rec["checked"]),
            path=raw,
        )
        return
    if not os.path.isdir(path):
        return
    real = os.path.realpath(path)
    inside = [w for w in walked if real == w or real.startswith(w.rstrip("/") + "/")]
    if inside:
        out.emit("walk", root=raw, inside=inside[0])
        return
    walked.append(real)
    before = len(walker.checkpoints)
    stats = walker.walk(real, dev)
    stats["root"] = raw
    out.emit("walk", inside=None, **stats)
    if stats["truncated"]:
        out.note(
            "walk_truncated",
            "%s: walk stopped at %s after %d entries; sizes are a lower "
            "bound" % (raw, stats["truncated"], walker.entries),
        )
    entry["ckpts"].extend(walker.checkpoints[before:])


def warn_filesystem(out, entry, min_free_pct):
    """Low space, low inodes, and a largest checkpoint that would not fit again."""
    rec, paths = entry["rec"], " ".join(entry["paths"])
    where = "%s (%s)" % (rec["mount"], paths)
    if rec["free_pct"] is not None and rec["free_pct"] < min_free_pct:
        out.warning(
            "low_space",
            "%s: %s free of %s (%.1f%% < %g%%)"
            % (
                where,
                gib(rec["free_bytes"]),
                gib(rec["total_bytes"]),
                rec["free_pct"],
                min_free_pct,
            ),
            mount=rec["mount"],
        )
    ipct = rec["inodes_free_pct"]
    if ipct is not None and ipct < min_free_pct:
        out.warning(
            "low_inodes",
            "%s: %d of %d inodes free (%.1f%% < %g%%)"
            % (where, rec["inodes_free"], rec["inodes_total"], ipct, min_free_pct),
            mount=rec["mount"],
        )
    if entry["ckpts"]:
        size, path, kind = max(entry["ckpts"])
        out.emit("checkpoint", path=path, size_bytes=size, kind=kind, mount=rec["mount"])
        if size > rec["free_bytes"]:
            out.warning(
                "checkpoint_wont_fit",
                "%s: the largest checkpoint %s is %s but only %s is free: the next "
                "save of that size will not fit" % (where, path, gib(size), gib(rec["free_bytes"])),
                mount=rec["mount"],
                path=path,
                size_bytes=size,
            )


def statvfs_record(path, mounts):
    rec = {"path": path, "exists": os.path.exists(path), "checked": None}
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and probe != os.path.dirname(probe):
        probe = os.path.dirname(probe)
    rec["checked"] = probe
    try:
        vfs = os.statvfs(probe)
        dev = os.stat(probe).st_dev
    except OSError as exc:
        rec["error"] = str(exc)
        return rec, None
    total = vfs.f_blocks * vfs.f_frsize
    free = vfs.f_bavail * vfs.f_frsize
    mnt, fstype = mount_of(os.path.realpath(probe), mounts)
    rec.update(
        {
            "mount": mnt,
            "fstype": fstype,
            "total_bytes": total,
            "free_bytes": free,
            "used_bytes": (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize,
            "free_pct": round(100.0 * free / total, 2) if total else None,
            "inodes_total": vfs.f_files or None,
            "inodes_free": vfs.f_favail if vfs.f_files else None,
            "inodes_free_pct": round(100.0 * vfs.f_favail / vfs.f_files, 2)
            if vfs.f_files
            else None,
        }
    )
    return rec, dev


def gib(n):
    return "%.1f GiB" % (n / float(1 << 30))


def is_checkpoint_file(name, folder=""):
    """A checkpoint's file by its name: a torch or safetensors suffix, or a ``.bin`` named
    as HF and DeepSpeed name theirs (``pytorch_model*``, ``*optim*``, ``*model_states*``)."""
    # A .pth in site-packages is Python's path configuration file, not a torch checkpoint.
    if name.endswith(".pth") and os.path.basename(folder) in ("site-packages", "dist-packages"):
        return False
    if name.endswith(CKPT_SUFFIXES):
        return True
    if not name.endswith(".bin"):
        return False
    stem = name[:-4]
    return stem.startswith("pytorch_model") or "optim" in stem or "model_states" in stem


def is_checkpoint_dir(name):
    """A save folder's name: ``checkpoint-500``, ``global_step100``, ``Epoch_3``, ``iter7``."""
    head = name.rstrip("0123456789")
    if head == name:
        return False
    head = head.lower()
    return head in CKPT_DIR_WORDS or (head[-1:] in ("-", "_") and head[:-1] in CKPT_DIR_WORDS)


def mount_of(path, mounts):
    """(mount point, fs type) holding ``path``, from /proc/self/mounts (longest match)."""
    best = ("/", None)
    for mnt, fstype in mounts:
        if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
            best = (mnt, fstype)
    return best


def read_mounts():
    mounts = []
    for line in (read_text("/proc/self/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) >= 3:
            mounts.append((parts[1].replace("\\040", " "), parts[2]))
    return mounts


class Walk(object):
    """A bounded, one-filesystem walk: top files by size and checkpoint sizes.

    A checkpoint is (a) a directory named like ``checkpoint-500`` / ``global_step100`` /
    ``iter_0001000`` holding checkpoint files anywhere below it (its whole subtree counts: a
    save writes all of it), else (b) a directory with a DCP ``.metadata`` or a
    ``*.index.json`` next to checkpoint files (its files count), else (c) a single checkpoint
    file (``.pt``, ``.safetensors`` ...).
    """

    def __init__(self, top, max_entries, deadline):
        self.top = top
        self.max_entries = max_entries
        self.deadline = deadline
        self.heap = []  # (size, path, mtime, is_ckpt), smallest first
        self.entries = 0
        self.checkpoints = []  # (size, path, kind)

    def walk(self, root, dev):
        """Walk ``root`` on device ``dev`` (depth first, within the entry and time budgets)."""
        stats = {
            "root": root,
            "files": 0,
            "dirs": 0,
            "bytes": 0,
            "truncated": None,
            "errors": 0,
            "other_filesystems": 0,
        }
        named = {}  # named checkpoint dir -> [bytes, ckpt files]
        stack = [(root, None)]
        while stack and not stats["truncated"]:
            path, named_root = stack.pop()
            if time.monotonic() > self.deadline:
                stats["truncated"] = "max_seconds"
                break
            stats["dirs"] += 1
            if named_root is None and is_checkpoint_dir(os.path.basename(path)):
                named_root = path
                named[path] = [0, 0]
            self._directory(path, named_root, named, stats, stack, dev)
        for path, (size, count) in named.items():
            if count:
                self.checkpoints.append((size, path, "dir"))
        return stats

    def _directory(self, path, named_root, named, stats, stack, dev):
        """One directory's entries: subdirectories onto ``stack``, files into the counts.

        The loop runs once per entry (up to --max-entries), so its bookkeeping stays inline
        instead of costing a call per file.
        """
        direct, direct_ckpt, marked = 0, 0, False
        try:
            it = os.scandir(path)
        except OSError:
            stats["errors"] += 1
            return
        with it:
            for entry in it:
                if self.entries >= self.max_entries:
                    stats["truncated"] = "max_entries"
                    break
                self.entries += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    stats["errors"] += 1
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if st.st_dev != dev:
                        stats["other_filesystems"] += 1
                    else:
                        stack.append((entry.path, named_root))
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                size = st.st_size
                stats["files"] += 1
                stats["bytes"] += size
                ckpt = is_checkpoint_file(entry.name, os.path.dirname(entry.path))
                if entry.name == ".metadata" or entry.name.endswith(".index.json"):
                    marked = True
                direct += size
                direct_ckpt += ckpt
                if named_root is not None:
                    named[named_root][0] += size
                    named[named_root][1] += ckpt
                elif ckpt:
                    self.checkpoints.append((size, entry.path, "file"))
                item = (size, entry.path, int(st.st_mtime), ckpt)
                if len(self.heap) < self.top:
                    heapq.heappush(self.heap, item)
                elif self.heap and size > self.heap[0][0]:
                    heapq.heapreplace(self.heap, item)
        if named_root is None and marked and direct_ckpt:
            # a DCP / sharded dir: replace its single files by the directory as one checkpoint
            self.checkpoints = [c for c in self.checkpoints if os.path.dirname(c[1]) != path]
            self.checkpoints.append((direct, path, "dir"))
