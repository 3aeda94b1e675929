# remotekit boot: what the constant loader (``python -c LOADER``) runs first, and the only
# part compiled every time. It holds the rules a cache folder there is held to (cache_folder:
# what is read from one runs), written once for the code cache here and the runner's package
# cache, and it runs what comes right behind it on stdin (``<length>[ runner]\n<source>``):
#
# - an agent's source: compiled through CodeCache (the agent compiles in ~5 ms on a fresh
#   Python; its cached code loads in well under one), then its ``main(cache, cache_folder)``,
#   which keeps the cache for the runner's code and the steps' scripts and hands the rules
#   to the runner; the agent then takes what the loader's buffered read holds beyond it;
# - marked ``runner`` (one process per step): the runner, as the program, given the rules,
#   with no code cache (one step: nothing to gain from keeping its code).
#
# A runner run with no boot (``python runner.py``) keeps no packages: each step brings its own.
#
# Standard library only, and parsed by every Python the loader may meet: on one too old for
# the cache it compiles as without it, and the agent's hello says the version.
import os
import stat
import sys


def sha256():
    """hashlib's sha256, from the module hashlib loads it from (without hashlib's ~4 ms)."""
    for module in ("_sha256", "_sha2", "hashlib"):  # _sha2: Python >= 3.12
        try:
            return __import__(module).sha256
        except (ImportError, AttributeError):
            pass
    return None


def safe_above(folder):
    """Whether no one but us and root can replace ``folder`` or a folder above it: each is
    ours or root's, and no one else may write to it unless it is sticky (/tmp)."""
    path = os.path.realpath(folder)
    while True:
        st = os.stat(path)
        if st.st_uid not in (0, os.geteuid()):
            return False
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return False
        if path == os.path.dirname(path):
            return True
        path = os.path.dirname(path)


def ours_alone(folder, private):
    """Whether ``folder`` is a folder (not a link) of ours no one else may write to, nor
    (``private``) enter; made (0700) when it is not there."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(folder)
    mask = 0o077 if private else 0o022
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & mask


def cache_folder(name):
    """The cache folder ``$XDG_CACHE_HOME/remotekit/<name>`` (else under ``~/.cache``), or
    None unless it is ours alone (0700) and the folders above it are ours (or, above the
    cache home, root's) and no one else's to write: what is read from there runs. Each
    folder is checked before anything is made in it, so an untrusted one gets nothing."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    base = os.path.normpath(base)
    base = os.path.join(os.path.realpath(os.path.dirname(base)), os.path.basename(base))
    path = os.path.join(base, "remotekit", name)
    try:
        if not safe_above(os.path.dirname(base)):
            return None
        for folder, private in ((base, False), (os.path.dirname(path), False), (path, True)):
            if not ours_alone(folder, private):
                return None
    except (OSError, ValueError):
        return None
    return path


class CodeCache(object):
    """Code this Python compiled before, by the hash of its source: the runner, and the
    scripts and modules steps ship (``sysinfo.py`` compiles in ~9 ms, its code loads in
    ~0.2), kept across agents in ``$XDG_CACHE_HOME/remotekit/code`` (else
    ``~/.cache/remotekit/code``), as Python keeps ``__pycache__`` beside a module. The
    folder is used only when cache_folder trusts it, through a descriptor, never by its
    name again; where there is no such folder (a read-only home, a cache home others may
    write to) every step compiles, as without a cache. Entries
    are written whole (a private temporary, then renamed) and the oldest are removed past
    ``KEEP``; an entry that does not load is compiled again and replaced."""

    KEEP = 256

    def __init__(self):
        self.fd = None
        try:
            self.open()
        except Exception:  # an old Python (no sys.implementation): it compiles, as without
            self.fd = None

    def open(self):
        self.tag = "%s.O%d" % (sys.implementation.cache_tag, sys.flags.optimize)
        self.magic = self.tag.encode()  # the bytecode's own version, as a .pyc says it:
        try:  # part of each entry's hash
            import _frozen_importlib_external as machinery

            self.magic = machinery.MAGIC_NUMBER
        except ImportError:
            pass
        self.sha256 = sha256()
        if self.sha256 is None or sys.implementation.cache_tag is None:
            return  # no hash to name entries by; a Python that caches no bytecode
        path = cache_folder("code")
        if path is None:
            return
        try:  # no one else can replace it now that it is checked: the folders above are ours
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except (OSError, ValueError):
            return

    def compile(self, source, path):
        """``compile(source, path, "exec")`` (``dont_inherit``), from the cache when this
        Python (its version and ``-O``) compiled the same bytes before."""
        if self.fd is None:
            return compile(source, path, "exec", dont_inherit=True)
        if not isinstance(source, bytes):
            source = source.encode("utf-8")
        name = "%s.%s" % (self.sha256(self.magic + source).hexdigest(), self.tag)
        code = self.load(name)
        if code is None:
            code = compile(source, path, "exec", dont_inherit=True)
            self.store(name, code)
        else:
            import _imp

            _imp._fix_co_filename(code, path)  # as importlib does for a moved .pyc
        return code

    def load(self, name):
        import marshal

        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=self.fd)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    return None
                code = marshal.loads(f.read())
        except (OSError, ValueError, EOFError, TypeError):
            return None
        return code if isinstance(code, type(self.load.__code__)) else None

    def store(self, name, code):
        import marshal

        tmp = "%s.%d.tmp" % (name, os.getpid())
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=self.fd
            )
            with os.fdopen(fd, "wb") as f:
                f.write(marshal.dumps(code))
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except (OSError, ValueError):
            try:
                os.unlink(tmp, dir_fd=self.fd)
            except OSError:
                pass
            return
        self.prune()

    def prune(self):
        """Past KEEP entries, the older half goes (by when each was written)."""
        try:
            names = os.listdir(self.fd)
            if len(names) <= self.KEEP:
                return
            when = {}
            for n in names:
                try:
                    when[n] = os.stat(n, dir_fd=self.fd, follow_symlinks=False).st_mtime
                except OSError:
                    pass
            for n in sorted(when, key=when.get)[: len(when) - self.KEEP // 2]:
                os.unlink(n, dir_fd=self.fd)
        except OSError:
            pass

    def hook(self):
        """Modules a step imports from source with no valid ``.pyc`` (the files it shipped,
        in its own temporary folder) compile through the cache: a path hook ahead of
        Python's, whose source loader is Python's but for where the code comes from."""
        try:
            import _frozen_importlib_external as machinery
        except ImportError:
            return
        cache = self

        class Loader(machinery.SourceFileLoader):
            def source_to_code(self, data, path, _optimize=-1):
                return cache.compile(data, path)

        import _imp

        loaders = [
            (machinery.ExtensionFileLoader, _imp.extension_suffixes()),
            (Loader, machinery.SOURCE_SUFFIXES),
            (machinery.SourcelessFileLoader, machinery.BYTECODE_SUFFIXES),
        ]
        sys.path_hooks.insert(0, machinery.FileFinder.path_hook(*loaders))
        sys.path_importer_cache.clear()


def main():
    stdin = sys.stdin.buffer
    size, _, kind = stdin.readline().partition(b" ")
    source = stdin.read(int(size))
    if kind.strip() == b"runner":
        runner = {"__name__": "__main__", "__builtins__": __builtins__}
        runner["cache_folder"] = cache_folder
        exec(compile(source, "<remotekit runner>", "exec", dont_inherit=True), runner)
        return
    cache = CodeCache()
    agent = {"__name__": "remotekit_agent", "__builtins__": __builtins__}
    exec(cache.compile(source, "<remotekit agent>"), agent)
    agent["main"](cache, cache_folder)


if __name__ == "__main__":
    main()
