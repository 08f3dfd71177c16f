"""The check registry: `@check`, parameter schemas from signatures, and check discovery.

A check is a function in a subsystem module::

    @check(needs=["file /proc/meminfo"])
    def memory(host: Host, *, min_total: Size) -> Result:
        '''MemTotal is at least `min`.

        Why it matters ... How it decides ... How to fix ...'''

registered as `<subsystem>.<function name>` (here `node.memory`; see `subsystem_of`). Its parameters are
its keyword-only arguments; their annotations (int, float, str, bool, tuple[str, ...] for lists, Size)
are the types a profile is validated against, their defaults the defaults. The first
docstring line is the title `clustercheck checks` shows; the rest is `explain`.

Where checks come from, in this order: the built-in `clustercheck.checks` package (the
repository's top-level `checks/` folder, mapped into the package by pyproject.toml so a
source checkout and an installed wheel find it the same way), site folders (`--checks
DIR`, a profile's `check_dirs:`), and the `clustercheck.checks` entry point group.
Built-in modules are imported only when a profile names one of their checks.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import math
import pkgutil
import re
import sys
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustercheck.errors import UsageError
from clustercheck.result import ACTIONS

if typing.TYPE_CHECKING:
    from clustercheck.result import Result

CheckFunc = Callable[..., "Result"]
#: A check's own load-time rule on its parameters: (the parameters with defaults filled in, the
#: names of the profile and of those it extends) -> problems, each one sentence; [] when fine.
Validator = Callable[[Mapping[str, Any], tuple[str, ...]], list[str]]

# -- sizes ----------------------------------------------------------------------------

# ASCII: under Unicode case folding the Kelvin sign would match K (and be no key of _POWERS)
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTPE]?)(i?)(B?)\s*$", re.IGNORECASE | re.ASCII)
_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


class Size(int):
    """A number of bytes, written in profiles as `512GiB`, `1.9TiB`, `500GB`, `64G` or 1024.

    KiB/MiB/... and bare K/M/G/T (as Slurm and `free` use them) are powers of 1024;
    KB/MB/GB/TB are powers of 1000.
    """

    @classmethod
    def parse(cls, value: object) -> Size:
        if isinstance(value, bool):
            raise ValueError(f"expected a size like 512GiB, got {value!r}")
        if isinstance(value, int):
            if value < 0:
                raise ValueError(f"a size cannot be negative: {value}")
            return cls(value)
        if isinstance(value, float) and value >= 0:
            if math.isinf(value):
                raise ValueError(f"a size must be finite, got {value!r}")
            return cls(int(value))
        if isinstance(value, str):
            m = _SIZE_RE.match(value)
            if m:
                number, prefix, binary, byte = m.groups()
                decimal = byte and not binary and prefix
                base = 1000 if decimal else 1024
                n = float(number) * base ** _POWERS[prefix.upper()]
                if math.isinf(n):
                    raise ValueError(f"the size {value!r} is too large")
                return cls(int(n))
        raise ValueError(f"expected a size like 512GiB, 1.9TiB or 500GB, got {value!r}")

    def __str__(self) -> str:
        return human_size(self)


def human_size(n: float) -> str:
    """1.9 TiB, 512 GiB, 4 KiB, 17 B."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" or float(n).is_integer() else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


# -- parameters -----------------------------------------------------------------------

_TYPE_NAMES: dict[Any, str] = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "true/false",
    tuple[str, ...]: "list of strings",
    Size: "size like 512GiB",
}

#: A parameter every check has: its time budget in seconds (reserved name).
TIMEOUT_PARAM = "timeout"
DEFAULT_CHECK_TIMEOUT = 30.0


def coerce(kind: Any, value: object) -> Any:
    """Convert a YAML value to a parameter's type, or raise ValueError saying what was expected."""
    if kind is Size:
        return Size.parse(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():  # 8.0, as JSON Schema's integer allows
            return int(value)
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                raise ValueError(f"the number {value} is too large") from None
            if math.isnan(number):
                raise ValueError("expected a number, got .nan (not a number)")
            return number
    elif kind is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError(f"expected a string, got the number {value!r}: quote it ('{value}')")
    elif kind == tuple[str, ...]:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        if isinstance(value, list):
            bad = next(v for v in value if not isinstance(v, str))
            raise ValueError(f"expected a list of strings, but it holds {bad!r}: quote it")
    shown = "nothing" if value is None else f"{value!r}"
    name = _TYPE_NAMES[kind]
    raise ValueError(f"expected {'an' if name[0] in 'aeiou' else 'a'} {name}, got {shown}")


@dataclass(frozen=True)
class Param:
    name: str
    type: Any
    default: Any
    required: bool

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES[self.type]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type_name,
            "required": self.required,
            "default": None if self.required else self.default,
        }


@dataclass(frozen=True)
class CheckSpec:
    id: str
    func: CheckFunc
    params: tuple[Param, ...]
    title: str
    doc: str
    needs: tuple[str, ...]
    timeout: float
    source: str
    validate: Validator | None = None
    action: str = ""  # the ACTIONS entry its warn and fail results carry unless they name another

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "needs": list(self.needs),
            "timeout_s": self.timeout,
            "params": [p.to_json() for p in self.params],
            "source": self.source,
            "action": self.action,
        }


_REGISTRY: dict[str, CheckSpec] = {}


F = typing.TypeVar("F", bound=Callable[..., Any])


@typing.overload
def check(func: F, /) -> F: ...


@typing.overload
def check(
    *,
    id: str | None = None,
    needs: Iterable[str] = (),
    timeout: float = DEFAULT_CHECK_TIMEOUT,
    validate: Validator | None = None,
    action: str = "",
) -> Callable[[F], F]: ...


def check(
    func: F | None = None,
    /,
    *,
    id: str | None = None,
    needs: Iterable[str] = (),
    timeout: float = DEFAULT_CHECK_TIMEOUT,
    validate: Validator | None = None,
    action: str = "",
) -> Any:
    """Register a check. Usable bare (`@check`) or with options (`@check(needs=[...])`).

    `needs` says what the check reads on a node ("command nvidia-smi", "file /proc/meminfo",
    "probe nvml"); `timeout` is its default time budget in seconds; `validate` (a Validator)
    judges the check's parameters when a profile loads, each problem reported at the check's
    FILE:LINE in the profile like the other profile problems. `action` (one of
    `result.ACTIONS`) is what its warn and fail results ask for unless one names another.
    """

    def register(f: F) -> F:
        spec = dataclasses.replace(_make_spec(f, id, tuple(needs), timeout), validate=validate, action=action)
        if action and action not in ACTIONS:
            raise UsageError(
                f"{spec.source}: check {spec.id}: unknown action {action!r}; use one of {', '.join(ACTIONS)}"
            )
        old = _REGISTRY.get(spec.id)
        if old is not None and old.source != spec.source:
            raise UsageError(f"check {spec.id} is defined twice: in {old.source} and in {spec.source}")
        _REGISTRY[spec.id] = spec
        return f

    return register(func) if func is not None else register


def subsystem_of(module: str) -> str:
    """The subsystem a check's module gives its id: `clustercheck.checks.gpu` and every module
    of the `clustercheck.checks.gpu` package (`...gpu.nvlink`) give `gpu`, so a subsystem can
    be split into files without renaming its checks; a site folder's `x.py` gives `x`, any
    other module its last name."""
    for prefix in ("clustercheck.checks.", "clustercheck_site."):
        if module.startswith(prefix):
            return module[len(prefix) :].split(".", 1)[0]
    return module.rsplit(".", 1)[-1]


def _make_spec(f: CheckFunc, check_id: str | None, needs: tuple[str, ...], timeout: float) -> CheckSpec:
    check_id = check_id or f"{subsystem_of(f.__module__)}.{f.__name__}"
    where = f"{inspect.getsourcefile(f) or f.__module__}:{f.__code__.co_firstlineno}"
    hints = typing.get_type_hints(f)
    params = []
    for p in inspect.signature(f).parameters.values():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        if p.name == TIMEOUT_PARAM:
            raise UsageError(f"{where}: check {check_id}: `timeout` is reserved for the check's time budget")
        kind = hints.get(p.name)
        if kind not in _TYPE_NAMES:
            raise UsageError(
                f"{where}: check {check_id}: parameter {p.name} has type {kind!r}; "
                "use int, float, str, bool, tuple[str, ...] or Size"
            )
        required = p.default is inspect.Parameter.empty
        params.append(Param(p.name, kind, None if required else p.default, required))
    doc = inspect.cleandoc(f.__doc__ or "")
    title, _, rest = doc.partition("\n")
    if not title:
        raise UsageError(f"{where}: check {check_id} needs a docstring: its first line is the check's title")
    return CheckSpec(check_id, f, tuple(params), title.strip(), rest.strip(), needs, timeout, where)


# -- discovery ------------------------------------------------------------------------

_loaded_dirs: set[Path] = set()
_entry_points_loaded = False


def builtin_modules() -> list[str]:
    """The built-in subsystems: each a module of `checks/`, or a package whose modules all
    hold that subsystem's checks."""
    pkg = importlib.import_module("clustercheck.checks")
    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


def _import_subsystem(name: str, check_id: str = "") -> None:
    """Import subsystem `name`: a module, or a package and its modules. Looking for one check
    (`check_id`), a package's module named after it (`gpu.nvlink` in checks/gpu/nvlink.py) is
    tried first and the others only if it is not there, so a prolog imports what it runs."""
    module = importlib.import_module(f"clustercheck.checks.{name}")
    subs = [m.name for m in pkgutil.iter_modules(getattr(module, "__path__", [])) if not m.name.startswith("_")]
    if check_id in _REGISTRY:
        return
    wanted = check_id.partition(".")[2]
    if wanted in subs:
        importlib.import_module(f"clustercheck.checks.{name}.{wanted}")
        if check_id in _REGISTRY:
            return
    for sub in subs:
        importlib.import_module(f"clustercheck.checks.{name}.{sub}")


def load_dir(folder: Path) -> None:
    """Import every `*.py` in a site checks folder (as NHC sites drop scripts into theirs)."""
    try:
        folder = folder.resolve()
        is_dir = folder.is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte
        is_dir = False
    if folder in _loaded_dirs:
        return
    if not is_dir:
        raise UsageError(f"checks folder {folder} does not exist")
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        name = f"clustercheck_site.{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"{path}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except UsageError:
            sys.modules.pop(name, None)
            raise
        except (Exception, SystemExit) as exc:
            sys.modules.pop(name, None)
            where = str(path)
            if isinstance(exc, SyntaxError) and exc.lineno:
                where = f"{exc.filename or path}:{exc.lineno}"
            else:  # the deepest frame of the module itself
                tb = exc.__traceback__
                lines = []
                while tb is not None:
                    if tb.tb_frame.f_code.co_filename == str(path):
                        lines.append(tb.tb_lineno)
                    tb = tb.tb_next
                if lines:
                    where = f"{path}:{lines[-1]}"
            message = " ".join(str(exc).split())
            raise UsageError(f"{where}: the check module failed to load: {type(exc).__name__}: {message}") from exc
    # only once it all loaded: a folder that failed fails again on the next load, not silently
    _loaded_dirs.add(folder)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group="clustercheck.checks"):
        try:
            ep.load()
        except Exception as exc:
            raise UsageError(f"entry point {ep.name} = {ep.value} failed to load: {type(exc).__name__}: {exc}") from exc


def lookup(check_id: str) -> CheckSpec | None:
    """The spec of `check_id`, importing only the module that should define it."""
    if check_id in _REGISTRY:
        return _REGISTRY[check_id]
    stem = check_id.split(".", 1)[0]
    if re.fullmatch(r"[a-z_][a-z0-9_]*", stem) and stem in builtin_modules():
        _import_subsystem(stem, check_id)
    if check_id not in _REGISTRY:
        _load_entry_points()
    return _REGISTRY.get(check_id)


def all_checks() -> list[CheckSpec]:
    """Every check: built-in, from loaded site folders and from entry points."""
    for name in builtin_modules():
        _import_subsystem(name)
    _load_entry_points()
    return sorted(_REGISTRY.values(), key=lambda s: s.id)


def known_ids() -> list[str]:
    return [s.id for s in all_checks()]
