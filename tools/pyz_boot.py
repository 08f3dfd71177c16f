"""The single file's unpacker. tools/build_pyz.py puts it, as "#|" comment lines, near the top
of the file and fills in the @...@ constants; the two lines of code above it check the Python
version and run it. With all but those two lines in comments, a truncated copy still parses:
it says it is truncated instead of failing with a SyntaxError. Only Python 3.10+ runs this.

The payload below it is a zip in base64 comment lines. The first run of a build unpacks it into
a cache folder (CLUSTERCHECK_CACHE; default /var/cache/clustercheck for root, else
~/.cache/clustercheck) and compiles what the node commands import, holding a lock on the cache
folder, through a private temporary folder renamed into place: runs that start together (8 job
steps after an upgrade) wait for one to unpack, never see half a copy, and a run killed while
unpacking leaves nothing behind but its temporary folder, removed by the next. Later runs import
from there: one stat to find it.
"""

import contextlib
import itertools
import os
import stat
import sys
from typing import NoReturn

VERSION = "@VERSION@"
BUILD = "@BUILD@"
PAYLOAD_BYTES = int("@PAYLOAD_BYTES@")
PAYLOAD_SHA256 = "@PAYLOAD_SHA256@"
FILE_BYTES = int("@FILE_BYTES@")  # the whole file's size: a cut or padded copy is caught on every run
BEGIN = b"# clustercheck payload" + b" begins\n"  # split: the unpacker must not contain them
END = b"# clustercheck payload" + b" ends\n"


def broken(message: str) -> NoReturn:
    """The single file cannot run: one line, and the prolog's --on-internal-error policy."""
    args = sys.argv[1:]
    while args[:1] == ["--debug"]:
        args = args[1:]
    line = f"clustercheck: {os.path.abspath(__file__)}: {message}"
    code = 70
    if args[:1] == ["prolog"]:  # a bad copy on a shared folder must not drain every node
        fail = "--on-internal-error=fail" in args or ("--on-internal-error", "fail") in itertools.pairwise(args)
        code = 70 if fail else 0
        line += "; failing the node (--on-internal-error fail)" if fail else "; passing the node"
        with contextlib.suppress(Exception):
            import socket

            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.settimeout(1.0)
            s.connect("/dev/log")
            s.send(("<27>" + line).encode("utf-8", "replace"))  # daemon.err
            s.close()
    sys.stderr.write(line + "\n")
    sys.exit(code)


def cache_root() -> str:
    root = os.environ.get("CLUSTERCHECK_CACHE")
    if root:
        return root
    if os.geteuid() == 0:
        return "/var/cache/clustercheck"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "clustercheck")


def safe(root: str) -> bool:
    """Code is imported from here (as root, by slurmd): only this user may write to it."""
    try:
        st = os.lstat(root)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def payload() -> bytes:
    """The zip below the code, checked against its length and SHA-256."""
    import base64
    import binascii
    import hashlib

    try:
        with open(__file__, "rb") as f:
            data = f.read()
    except OSError as exc:
        broken(f"cannot read it: {exc.strerror or exc}")
    start = data.find(b"\n" + BEGIN)
    end = data.find(b"\n" + END, start + 1)
    if start < 0 or end < 0:
        broken(f"truncated ({len(data)} bytes, its end is missing: an interrupted copy?): copy it again")
    lines = data[start + 1 + len(BEGIN) : end].split(b"\n")
    try:
        raw = base64.b64decode(b"".join(line[1:] for line in lines))
    except (ValueError, binascii.Error):
        raw = b""
    if len(raw) != PAYLOAD_BYTES or hashlib.sha256(raw).hexdigest() != PAYLOAD_SHA256:
        broken(f"damaged ({len(data)} bytes; its contents do not match their SHA-256): copy it again")
    return raw


# compiled while unpacking (what the prolog imports: ~190 ms of CPU); the rest compiles on first import
PRECOMPILE = ("clustercheck", "yaml")
KEEP_BUILDS = 3  # unpacked builds kept (the newest): a node still running an older copy keeps its own
LOCK_WAIT = 5.0  # seconds to wait for another run to unpack (it takes ~0.3 s) before unpacking privately:
# the prolog's budget (10 s) starts after this


def unpack(root: str, target: str) -> None:
    """Unpack into a private folder and rename it into place, holding the cache folder's lock."""
    import compileall
    import fcntl
    import glob
    import io
    import py_compile
    import shutil
    import tempfile
    import time
    import warnings
    import zipfile

    with open(os.path.join(root, ".lock"), "a") as lock:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OSError(f"another run held {root}/.lock for {LOCK_WAIT:g} s") from None
                time.sleep(0.01)
        if os.path.isfile(os.path.join(target, ".complete")):
            return  # the run we waited for unpacked it
        for stale in glob.glob(os.path.join(root, ".unpacking-*")):  # a run killed while unpacking
            shutil.rmtree(stale, ignore_errors=True)
        raw = payload()
        tmp = tempfile.mkdtemp(prefix=f".unpacking-{BUILD}-", dir=root)
        try:
            zipfile.ZipFile(io.BytesIO(raw)).extractall(tmp)
            with warnings.catch_warnings():  # a SyntaxWarning is the import's to show, not the unpacker's
                warnings.simplefilter("ignore")
                # timestamps (as imports write them), even with SOURCE_DATE_EPOCH set: no hashing per import
                mode = py_compile.PycInvalidationMode.TIMESTAMP
                for name in PRECOMPILE:
                    path, final = os.path.join(tmp, name), os.path.join(target, name)
                    if os.path.isdir(path):
                        compileall.compile_dir(path, ddir=final, quiet=2, invalidation_mode=mode)
                    elif os.path.isfile(path):
                        compileall.compile_file(path, ddir=target, quiet=2, invalidation_mode=mode)
            with open(os.path.join(tmp, ".complete"), "w") as f:
                f.write(f"{VERSION} {BUILD}\n")
            os.chmod(tmp, 0o755)
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        prune(root)


def prune(root: str) -> None:
    """Remove all but the KEEP_BUILDS newest unpacked builds (renamed out of the way first, so a
    half-removed one never looks complete). Called holding the lock."""
    import shutil

    builds = []
    for name in os.listdir(root):
        with contextlib.suppress(OSError):
            builds.append((os.stat(os.path.join(root, name, ".complete")).st_mtime, name))
    for _, name in sorted(builds, reverse=True)[KEEP_BUILDS:]:
        trash = os.path.join(root, f".unpacking-old-{name}")
        with contextlib.suppress(OSError):
            os.rename(os.path.join(root, name), trash)
        shutil.rmtree(trash, ignore_errors=True)


def private_copy() -> str:
    """No usable cache folder (read-only, no home): unpack for this run only."""
    import atexit
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix=f"clustercheck-{BUILD}-")
    atexit.register(shutil.rmtree, tmp, True)
    target = os.path.join(tmp, "lib")
    unpack(tmp, target)
    return target


def main() -> None:
    try:
        size = os.stat(__file__).st_size
    except OSError as exc:
        broken(f"cannot read it: {exc.strerror or exc}")
    if size != FILE_BYTES:  # even when its build is unpacked already: it is not the file that was built
        what = "truncated" if size < FILE_BYTES else "damaged"
        broken(f"{what} ({size} bytes, built as {FILE_BYTES}: an interrupted copy?): copy it again")
    root = cache_root()
    target = os.path.join(root, f"{VERSION}-{BUILD}")
    if not (os.path.isfile(os.path.join(target, ".complete")) and safe(root)):
        with contextlib.suppress(OSError):
            os.makedirs(root, 0o755)
        if os.path.isdir(root) and not safe(root):
            broken(
                f"its cache folder {root} is not owned by uid {os.geteuid()} or is writable by others: "
                "refusing to run code from it; fix it, or set CLUSTERCHECK_CACHE"
            )
        try:
            if not os.path.isfile(os.path.join(target, ".complete")):
                unpack(root, target)
        except OSError:
            try:
                target = private_copy()
            except OSError as exc:
                broken(f"cannot unpack it: {exc}")
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or ".") == here:
        sys.path[0] = target  # the cache, not the folder the file lies in
    else:
        sys.path.insert(0, target)
    from clustercheck.bare import main as run

    run()


main()
