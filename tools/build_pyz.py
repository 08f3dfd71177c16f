"""Build dist/clustercheck.pyz: one file that runs clustercheck on a node's own python3 (3.10+).

    python tools/build_pyz.py dist/clustercheck-0.1.0-py3-none-any.whl -o dist/clustercheck.pyz
    python tools/build_pyz.py --source . -o /tmp/clustercheck.pyz      (from a checkout: tests)

The file is tools/pyz_boot.py (a version check that parses under any Python, then an unpacker)
followed by a zip in base64 comment lines: clustercheck (from the wheel, or laid out as the wheel
lays it out) and the pure-Python dependencies as installed beside the Python running this script
(the venv's pinned versions; nothing is downloaded). The dependencies whose cores are C
extensions — typer (pydantic_core), paramiko (cryptography, bcrypt, PyNaCl), psutil — are not
carried: C extensions cannot be imported from a zip and are built per Python version. The file
runs clustercheck.bare, the commands a node needs without Typer, and names what to install for
the rest. PyYAML's optional C loader is left out too (its pure-Python loader is used).

The output is written atomically and is the same bytes for the same inputs.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import re
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
BOOT = HERE / "pyz_boot.py"

# distribution -> files of it left out (any other native file stops the build: it must be pure Python)
VENDORED = {
    "PyYAML": ("yaml/_yaml.",),  # the optional libyaml binding; yaml falls back to pure Python
    "rich": (),
    "python-hostlist": (),
    "nvidia-ml-py": ("example.py",),  # a demo script installed as a top-level module
    "prometheus_client": (),
}
NATIVE = (".so", ".pyd", ".dylib", ".dll")
SKIP_META = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
# A checkout laid out as pyproject.toml's [tool.setuptools.package-dir] installs it.
SOURCE_DIRS = {"clustercheck": "src/clustercheck", "clustercheck/checks": "checks", "clustercheck/profiles": "profiles"}
SOURCE_FILES = re.compile(r".*\.(py|json|yaml|sh)$|^py\.typed$")  # .sh: scripts that run on nodes
LINE = 120  # base64 characters per comment line


class BuildError(Exception):
    pass


def from_wheel(wheel: Path) -> dict[str, bytes]:
    files = {}
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.endswith("/") or name.rsplit("/", 1)[-1] in SKIP_META:
                continue
            files[name] = z.read(name)
    if "clustercheck/bare.py" not in files:
        raise BuildError(f"{wheel}: no clustercheck/bare.py in it: not a clustercheck wheel")
    return files


def from_source(root: Path) -> dict[str, bytes]:
    files = {}
    for package, folder in SOURCE_DIRS.items():
        base = root / folder
        for path in sorted(base.iterdir()):
            if path.is_file() and SOURCE_FILES.match(path.name):
                files[f"{package}/{path.name}"] = path.read_bytes()
        if package != "clustercheck/profiles":  # sub-packages, recursively (checks/gpu/ is one)
            for path in sorted(base.rglob("*")):
                rel = path.relative_to(base)
                nested = len(rel.parts) > 1 and "__pycache__" not in rel.parts
                if nested and path.is_file() and SOURCE_FILES.match(path.name):
                    files[f"{package}/{rel.as_posix()}"] = path.read_bytes()
    if "clustercheck/bare.py" not in files:
        raise BuildError(f"{root}: not a clustercheck checkout (no src/clustercheck/bare.py)")
    return files


def vendored() -> dict[str, bytes]:
    """The pure-Python dependencies as installed beside this Python, with their licences."""
    files: dict[str, bytes] = {}
    for name, leave_out in VENDORED.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise BuildError(
                f"{name} is not installed beside {sys.executable}: run this with the venv's python"
            ) from None
        for entry in dist.files or ():
            rel = entry.as_posix()
            if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc"):
                continue  # scripts in bin/, bytecode
            if rel.rsplit("/", 1)[-1] in SKIP_META:
                continue
            if rel.startswith(leave_out):
                continue
            if rel.endswith(NATIVE):
                raise BuildError(f"{name} {dist.version} has a C extension ({rel}): it cannot be carried")
            files[rel] = Path(str(dist.locate_file(entry))).read_bytes()
    return files


def payload(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, files[name])
    return out.getvalue()


def version_of(files: dict[str, bytes]) -> str:
    found = re.search(rb'^__version__ = "([^"]+)"', files["clustercheck/__init__.py"], re.M)
    if not found:
        raise BuildError("no __version__ in clustercheck/__init__.py")
    return found.group(1).decode()


# The file's only lines of code, first (a copy cut after them still parses, and says so): the
# version check, then run the "#|" lines below as the unpacker (tools/pyz_boot.py). Each is one
# statement that Python 2.7 and 3.0+ parse.
VERSION_CHECK = (
    "import sys; sys.version_info >= (3, 10) or (sys.stderr.write("
    '"clustercheck: needs Python 3.10 or newer, and %s is Python %s: run it with python3.10+\\n"'
    ' % (sys.executable or "this python", sys.version.split()[0])), sys.exit(64))'
)
RUN_UNPACKER = (
    '_cc = open(__file__, "rb").read(65536).partition(b"\\n#|end\\n"); '
    '_p = sys.argv[1:2] == ["prolog"] and not {"fail", "--on-internal-error=fail"} & set(sys.argv); '
    '_cc[1] or (sys.stderr.write("clustercheck: %s is truncated (an interrupted copy?): copy it again%s\\n"'
    ' % (__file__, "; passing the node" if _p else "")), sys.exit(0 if _p else 70)); '
    'exec(compile(b"\\n".join(x[2:] for x in _cc[0].split(b"\\n") if x[:2] == b"#|"), __file__, "exec"))'
)
TOP = f"""\
#!/usr/bin/env python3
{VERSION_CHECK}
{RUN_UNPACKER}
# clustercheck @VERSION@, the single file for compute nodes (build @BUILD@): run it with the
# node's own python3 (3.10 or newer), no venv; `--help` says what it runs. Its README section:
# "Deploying to compute nodes". Built by tools/build_pyz.py; the code is in the "#|" lines.
"""
FILE_BYTES_MARK = "@" * 12  # the file's own size, zero-padded to this width
BOOT_LIMIT = 65536  # TOP reads this much to find the unpacker


def render(files: dict[str, bytes]) -> bytes:
    raw = payload(files)
    digest = hashlib.sha256(raw).hexdigest()
    values = {
        "@VERSION@": version_of(files),
        "@BUILD@": digest[:12],
        "@PAYLOAD_BYTES@": str(len(raw)),
        "@PAYLOAD_SHA256@": digest,
        "@FILE_BYTES@": FILE_BYTES_MARK,  # filled in below, once the size is known (same width)
    }
    top, boot = TOP, BOOT.read_text(encoding="utf-8")
    for key, value in values.items():
        top, boot = top.replace(key, value), boot.replace(key, value)
    head = (top + "".join(f"#|{line}\n" for line in boot.splitlines()) + "#|end\n").encode("utf-8")
    if len(head) >= BOOT_LIMIT:
        raise BuildError(f"{BOOT} is too long: the first {BOOT_LIMIT} bytes must hold it")
    text = base64.b64encode(raw)
    lines = [b"#" + text[i : i + LINE] for i in range(0, len(text), LINE)]
    data = head + b"# clustercheck payload begins\n" + b"\n".join(lines) + b"\n# clustercheck payload ends\n"
    size = f"{len(data):0{len(FILE_BYTES_MARK)}d}".encode()
    assert data.count(FILE_BYTES_MARK.encode()) == 1 and len(size) == len(FILE_BYTES_MARK)
    return data.replace(FILE_BYTES_MARK.encode(), size)


def write(data: bytes, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("wheel", nargs="?", type=Path, help="the clustercheck wheel (make dist builds it)")
    source.add_argument("--source", type=Path, help="a clustercheck checkout instead of a wheel")
    parser.add_argument("-o", "--output", type=Path, default=Path("dist/clustercheck.pyz"))
    args = parser.parse_args(argv)
    try:
        files = from_wheel(args.wheel) if args.wheel else from_source(args.source)
        clash = sorted(set(files) & set(extra := vendored()))
        if clash:
            raise BuildError(f"a dependency would overwrite {clash[0]}")
        files.update(extra)
        data = render(files)
        write(data, args.output)
    except (BuildError, OSError, zipfile.BadZipFile) as exc:
        print(f"build_pyz: {exc}", file=sys.stderr)
        return 1
    print(f"{args.output}: {len(data) / 1e6:.2f} MB, {len(files)} files (clustercheck {version_of(files)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
