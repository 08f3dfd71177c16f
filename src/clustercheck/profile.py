"""Profiles: YAML files naming the checks to run and their parameters.

    name: gpu-node                # optional; the file's stem otherwise
    description: GPU compute node
    extends: base                 # a bundled profile's name or a path (relative to this file)
    check_dirs: [site-checks]     # site check folders (relative to this file)
    checks:
      node.memory: {min: 512GiB}  # check id: parameters
      node.kernel:                # empty: the check's defaults
      node.services: false        # drop a check the parent profile runs
      gpu.count: {expected: 8, timeout: 20}   # `timeout`: the check's time budget, seconds

Everything is validated before any host is contacted, and every problem is reported at
once as FILE:LINE: message (ProfileError, exit 64).
"""

from __future__ import annotations

import difflib
import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from clustercheck import registry
from clustercheck.errors import ProfileError, UsageError

if TYPE_CHECKING:
    from clustercheck.transports.base import Transport

_TOP_KEYS = {"name", "description", "extends", "check_dirs", "checks"}


class _Map(dict[Any, Any]):
    """A YAML mapping that remembers the line of each key (1-based) and its repeated keys."""

    def __init__(self, line: int = 1) -> None:
        super().__init__()
        self.line = line
        self.key_lines: dict[Any, int] = {}
        self.duplicates: list[tuple[Any, int]] = []  # (key, line of the repeat)


_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LineLoader(_BaseLoader):  # type: ignore[misc]
    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # PyYAML's scalar constructors let plain Python errors out for values that match a
        # tag's pattern but are not valid (`2020-13-45`, `!!int abc`, `!!float ` (IndexError),
        # `!!bool x` (KeyError)): give them the node's position like every other YAML error.
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"invalid value {node.value!r} for its type: {exc}", node.start_mark
            ) from None


def _construct_map(loader: Any, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    result = _Map(node.start_mark.line + 1)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            ) from None
        if key in result:
            result.duplicates.append((key, key_node.start_mark.line + 1))
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)


@dataclass(frozen=True)
class CheckConfig:
    """One check as a profile runs it: validated parameters and where they were set."""

    id: str
    params: dict[str, Any]
    timeout: float
    source: str


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    path: Path
    checks: tuple[CheckConfig, ...]
    check_dirs: tuple[Path, ...] = field(default=())


def bundled_dir() -> Path:
    # the package's folder (a plain directory in a wheel and in the editable checkout alike);
    # importlib.resources would cost a few ms on the prolog path for the same answer
    return Path(importlib.import_module("clustercheck.profiles").__path__[0])


def bundled_profiles() -> list[Path]:
    return sorted(bundled_dir().glob("*.yaml"))


def resolve(ref: str, relative_to: Path | None = None) -> Path:
    """A profile reference: a path to a file, else the name of a bundled profile."""
    candidates = []
    path = Path(ref)
    if relative_to is not None and not path.is_absolute():
        candidates.append(relative_to / path)  # relative to the profile, never to the cwd
    else:
        candidates.append(path)
    if ref and "/" not in ref and not ref.endswith((".yaml", ".yml")):
        candidates.append(bundled_dir() / f"{ref}.yaml")
    for c in candidates:
        try:
            if c.is_file():
                return c
        except (OSError, ValueError):  # a name too long, a NUL byte: no such profile
            continue
    names = ", ".join(p.stem for p in bundled_profiles())
    raise UsageError(f"profile {ref!r} not found: give a YAML file's path or a bundled profile ({names})")


TRUST_FLAG = "--trust-fixture-code"


def load(ref: str, *, extra_check_dirs: tuple[Path, ...] = (), allow_code: bool = True) -> Profile:
    """Load, merge (extends) and validate a profile; raise ProfileError listing every problem.

    allow_code=False is for a profile that came with a fixture (data people send each other):
    outside the bundled profiles it may neither name `check_dirs:` (Python that would be
    imported, as root in a prolog) nor `extends:` anything but a bundled profile's name.
    `extra_check_dirs` (--checks) are the user's own choice and always load. The profile itself
    must then be a .yaml/.yml file or a bundled profile's name: a fixture naming `/etc/shadow`
    as its profile must not get this machine's files parsed into error messages.
    """
    path = resolve(ref)
    if not allow_code and not (_is_bundled(path) or path.suffix in (".yaml", ".yml")):
        raise UsageError(
            f"the replayed fixture names {ref!r} as its profile, neither a .yaml file nor a bundled profile; "
            f"choose the profile yourself with --profile PROFILE (or pass {TRUST_FLAG})"
        )
    problems: list[str] = []
    chain = _Chain(allow_code=allow_code)
    raw_checks, name, description = _load_chain(path, problems, chain, seen=())
    dirs: list[Path] = []
    for d, where in [*((d, "--checks") for d in extra_check_dirs), *chain.dirs]:
        dirs.append(d)
        try:
            is_dir = d.is_dir()
        except (OSError, ValueError):  # a name too long, a NUL byte
            is_dir = False
        if not is_dir:
            problems.append(f"{where}: the checks folder {_shown(d)} does not exist")
            continue
        try:
            registry.load_dir(d)
        except UsageError as exc:  # FILE:LINE of the site module that failed
            problems.append(str(exc))
    for check_id, where in chain.dropped:
        if registry.lookup(check_id) is None:
            problems.append(f"{where}: `false` drops {_unknown(check_id)}")
    configs = []
    for check_id, (params, where) in raw_checks.items():
        config = _validate(check_id, params, where, problems)
        spec = registry.lookup(check_id) if config is not None else None
        if config is not None and spec is not None and spec.validate is not None:
            said = spec.validate(config.params, tuple(dict.fromkeys(chain.names)))
            problems += [f"{where}: {check_id}: {problem}" for problem in said]
            config = None if said else config
        if config is not None:
            configs.append(config)
    if problems:
        raise ProfileError(problems)
    return Profile(name, description, path, tuple(configs), tuple(dirs))


def _unknown(check_id: str) -> str:
    close = difflib.get_close_matches(check_id, registry.known_ids(), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown check {check_id!r}{hint}; `clustercheck checks` lists them"


# raw check table: id -> ({param: (value, "file:line")}, "file:line of the id")
_Raw = dict[str, tuple[dict[str, tuple[Any, str]], str]]


@dataclass
class _Chain:
    """What a chain of profiles collects besides checks, each with its "file:line"."""

    dirs: list[tuple[Path, str]] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    allow_code: bool = True
    names: list[str] = field(default_factory=list)  # of every profile in the chain, for checks' validate


def _is_bundled(path: Path) -> bool:
    try:
        return path.resolve().parent == bundled_dir().resolve()
    except (OSError, ValueError, RuntimeError):  # a symlink loop, a name too long
        return False


def _untrusted(what: str) -> str:
    return (
        f"{what}, and this profile came with the replayed fixture (fixtures are data: they load no code); "
        f"choose the profile yourself with --profile PROFILE, or pass {TRUST_FLAG} if you trust "
        "whoever made the fixture"
    )


def _bundled_only(ref: str) -> Path:
    """A bundled profile by its bare name, never a same-named file beside an untrusted profile."""
    names = [p.stem for p in bundled_profiles()]
    if ref not in names:
        raise UsageError(_untrusted(f"extends {ref!r} is not a bundled profile ({', '.join(names)})"))
    return bundled_dir() / f"{ref}.yaml"


def _load_chain(
    path: Path, problems: list[str], chain: _Chain, seen: tuple[Path, ...], via: str = ""
) -> tuple[_Raw, str, str]:
    """Read one profile and, first, the profiles it extends; `via` is the extends line here."""
    if path.resolve() in seen:
        loop = " -> ".join(str(p) for p in (*seen, path.resolve()))
        problems.append(f"{via or f'{path}:1'}: profiles extend each other in a loop: {loop}")
        return {}, path.stem, ""
    seen = (*seen, path.resolve())
    doc = _read_yaml(path, problems)
    if doc is None:
        return {}, path.stem, ""
    here = f"{path}"

    def at(line: int) -> str:
        return f"{here}:{line}"

    for key in doc:
        if key not in _TOP_KEYS:
            problems.append(f"{at(doc.key_lines[key])}: unknown key {key!r} (allowed: {', '.join(sorted(_TOP_KEYS))})")
    for key, line in doc.duplicates:
        problems.append(f"{at(line)}: {key!r} is given twice")

    raw: _Raw = {}
    name = _string(doc, "name", at, problems) or path.stem
    chain.names += [name, path.stem]
    description = _string(doc, "description", at, problems) or ""
    parent = doc.get("extends")
    if parent is not None:
        where = at(doc.key_lines["extends"])
        if not isinstance(parent, str):
            problems.append(f"{where}: extends must be a profile name or path")
        else:
            try:
                if chain.allow_code or _is_bundled(path):
                    parent_path = resolve(parent, relative_to=path.parent)
                else:
                    parent_path = _bundled_only(parent)
            except (UsageError, OSError, ValueError) as exc:
                problems.append(f"{where}: {exc}")
            else:
                raw, _, parent_description = _load_chain(parent_path, problems, chain, seen, via=where)
                description = description or parent_description

    check_dirs = doc.get("check_dirs", [])
    where = at(doc.key_lines.get("check_dirs", doc.line))
    if not (isinstance(check_dirs, list) and all(isinstance(d, str) for d in check_dirs)):
        problems.append(f"{where}: check_dirs must be a list of folders")
    elif check_dirs and not (chain.allow_code or _is_bundled(path)):
        problems.append(f"{where}: " + _untrusted("check_dirs names site check folders (Python code)"))
    else:
        chain.dirs.extend((path.parent / d, where) for d in check_dirs)

    checks = doc.get("checks", _Map())
    if not isinstance(checks, _Map):
        problems.append(f"{at(doc.key_lines['checks'])}: checks must be a mapping of check id to parameters")
        checks = _Map()
    for key, line in checks.duplicates:
        problems.append(f"{at(line)}: check {_name(key)} is listed twice")
    for check_id, params in checks.items():
        line = checks.key_lines[check_id]
        if not isinstance(check_id, str):
            problems.append(f"{at(line)}: check ids are strings like node.memory, got {check_id!r}")
            continue
        if params is False:
            if raw.pop(check_id, None) is None:
                chain.dropped.append((check_id, at(line)))
            continue
        if params is None or params is True:
            params = _Map()
        if not isinstance(params, _Map):
            problems.append(
                f"{at(line)}: {_name(check_id)}: parameters must be a mapping like {{expected: 8}}, "
                f"empty for the defaults, or false to drop the check; got {params!r}"
            )
            continue
        for pname, pline in params.duplicates:
            problems.append(f"{at(pline)}: {_name(check_id)}: parameter {pname!r} is given twice")
        merged = dict(raw[check_id][0]) if check_id in raw else {}
        for pname, value in params.items():
            merged[str(pname)] = (value, at(params.key_lines.get(pname, line)))
        raw[check_id] = (merged, at(line))  # an inherited check keeps its place in the parent's order
    return raw, name, description


def _string(doc: _Map, key: str, at: Any, problems: list[str]) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        problems.append(f"{at(doc.key_lines[key])}: {key} must be a string")
        return None
    return value


def _read_yaml(path: Path, problems: list[str]) -> _Map | None:
    try:
        data = path.read_bytes()
    except OSError as exc:
        problems.append(f"{path}:1: cannot read the profile: {exc.strerror or exc}")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        problems.append(f"{path}:{line}: not UTF-8 text: byte {data[exc.start]:#04x} at offset {exc.start}")
        return None
    try:
        doc = yaml.load(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        kind = "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
        problems.append(f"{path}:{line}: {kind}: {_one_line(exc.problem or exc.context or exc)}")
        return None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow; position: where
        if _BaseLoader is yaml.SafeLoader:  # the Python reader counts characters, libyaml bytes
            line = text[: exc.position].count("\n") + 1
        else:
            line = text.encode("utf-8")[: exc.position].count(b"\n") + 1
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character  # libyaml: a code point
        problems.append(f"{path}:{line}: YAML error: character {char!r} is not allowed ({exc.reason})")
        return None
    except yaml.YAMLError as exc:
        problems.append(f"{path}:1: YAML error: {_one_line(exc)}")
        return None
    except Exception as exc:  # a constructor's error outside construct_object (a top-level list), too deep
        problems.append(f"{path}:1: YAML error: {type(exc).__name__}: {_one_line(exc)}")
        return None
    if doc is None:
        problems.append(f"{path}:1: the profile is empty; it needs at least `checks:`")
        return None
    if not isinstance(doc, _Map):
        problems.append(
            f"{path}:1: a profile is a YAML mapping (name:, extends:, checks: ...), got {type(doc).__name__}"
        )
        return None
    return doc


def _one_line(message: object) -> str:
    return " ".join(str(message).split())


def _name(key: object) -> str:
    """A check id as written (node.memory), quoted when it is not plain printable text."""
    return key if isinstance(key, str) and key.isprintable() and key.strip() == key and key else repr(key)


def _shown(path: Path) -> str:
    """A path as is, or quoted with escapes when it holds control characters."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def _validate(check_id: str, params: dict[str, tuple[Any, str]], where: str, problems: list[str]) -> CheckConfig | None:
    try:
        spec = registry.lookup(check_id)
    except UsageError as exc:
        problems.append(f"{where}: {exc}")
        return None
    if spec is None:
        problems.append(f"{where}: {_unknown(check_id)}")
        return None
    values: dict[str, Any] = {}
    timeout = spec.timeout
    ok = True
    for pname, (value, pwhere) in params.items():
        if pname == registry.TIMEOUT_PARAM:
            try:
                timeout = registry.coerce(float, value)
                if not (timeout > 0 and math.isfinite(timeout)):
                    raise ValueError(f"the time budget must be a number of seconds more than 0, got {value!r}")
            except ValueError as exc:
                problems.append(f"{pwhere}: {check_id}.timeout: {exc}")
                ok = False
            continue
        param = spec.param(pname)
        if param is None:
            names = ", ".join(p.name for p in spec.params) or "none"
            problems.append(f"{pwhere}: {check_id} has no parameter {pname!r} (its parameters: {names}; and timeout)")
            ok = False
            continue
        try:
            values[pname] = registry.coerce(param.type, value)
        except ValueError as exc:
            problems.append(f"{pwhere}: {check_id}.{pname}: {exc}")
            ok = False
    for param in spec.params:
        if param.required and param.name not in values and param.name not in params:
            problems.append(f"{where}: {check_id} needs the parameter {param.name!r} (a {param.type_name})")
            ok = False
        elif param.name not in params:
            values[param.name] = param.default
    return CheckConfig(check_id, values, timeout, where) if ok else None


def json_schema() -> dict[str, Any]:
    """A JSON Schema of profiles for editors (yaml-language-server), from the registered checks."""
    ws = r"[ \t\n\r\f\v]"  # registry.Size's ASCII \s (ECMA-262's \s is Unicode whitespace)
    types: dict[str, dict[str, Any]] = {
        "integer": {"type": "integer"},
        "number": {"type": "number"},
        "string": {"type": "string"},
        "true/false": {"type": "boolean"},
        "list of strings": {"type": "array", "items": {"type": "string"}},
        "size like 512GiB": {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": rf"^{ws}*[0-9]+(\.[0-9]+)?{ws}*[KMGTPEkmgtpe]?[iI]?[bB]?{ws}*$"},
            ]
        },
    }
    checks: dict[str, Any] = {}
    for spec in registry.all_checks():
        props: dict[str, Any] = {
            p.name: {
                **types[p.type_name],
                "description": f"{p.type_name}" + ("" if p.required else f", default {p.default!r}"),
            }
            for p in spec.params
        }
        props["timeout"] = {"type": "number", "exclusiveMinimum": 0, "description": "time budget in seconds"}
        required = [p.name for p in spec.params if p.required]
        checks[spec.id] = {
            "description": spec.title,
            "anyOf": [
                {"type": "object", "properties": props, "additionalProperties": False, "required": required},
                {"const": False},
                *([{"type": "null"}, {"const": True}] if not required else []),
            ],
        }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "clustercheck profile",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string"},
            "description": {"type": "string"},
            "extends": {"type": "string", "description": "a bundled profile's name or a path"},
            "check_dirs": {"type": "array", "items": {"type": "string"}},
            "checks": {"type": "object", "properties": checks, "additionalProperties": False},
        },
    }


def explain_sources(prof: Profile) -> str:
    """`profiles show`: the profile after `extends`, as YAML, each setting with where it was set.

    Every check in the order it runs with every parameter (set ones as written, with the
    file:line that set them; the rest `# default`), the check folders and the extends chain.
    The output is itself a valid profile (nothing left to inherit).
    """
    bundled = str(bundled_dir().resolve())

    def shown(where: str) -> str:
        try:
            text = str(Path(where).resolve()) if ":" not in where else where
        except (OSError, ValueError):
            text = where
        if text.startswith(bundled + "/"):
            return "<bundled>/" + text[len(bundled) + 1 :]
        absolute = str(Path.cwd())
        return text[len(absolute) + 1 :] if text.startswith(absolute + "/") else text

    def plain(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        for kind in (bool, int, float, str):  # exactly these types: the YAML dumper knows no subclass
            if isinstance(v, kind):
                return kind(v)
        return None if v is None else str(v)

    def value(v: Any) -> str:
        text = yaml.safe_dump(plain(v), default_flow_style=True, width=1_000_000)
        return str(text).strip().removesuffix("...").strip()

    lines: list[tuple[str, str]] = []  # (yaml, where)
    chain: list[Path] = []
    path: Path | None = prof.path
    name_at = description_at = ""
    while path is not None and path.resolve() not in [p.resolve() for p in chain] and len(chain) < 32:
        chain.append(path)
        doc = _read_yaml(path, [])
        if doc is None:
            break
        if not name_at:
            name_at = f"{path}:{doc.key_lines['name']}" if "name" in doc else f"{path} (the file's name)"
        if not description_at and "description" in doc:
            description_at = f"{path}:{doc.key_lines['description']}"
        parent = doc.get("extends")
        try:
            path = resolve(parent, relative_to=path.parent) if isinstance(parent, str) else None
        except UsageError:
            path = None
    collected = _Chain()
    raw, _, _ = _load_chain(prof.path, [], collected, seen=())
    dir_at = {d.resolve(): where for d, where in collected.dirs}
    lines.append((f"name: {value(prof.name)}", name_at))
    if prof.description:
        lines.append((f"description: {value(prof.description)}", description_at))
    if prof.check_dirs:
        lines.append(("check_dirs:", ""))
        lines += [(f"  - {value(str(d.resolve()))}", dir_at.get(d.resolve(), "--checks")) for d in prof.check_dirs]
    lines.append(("checks:", ""))
    for config in prof.checks:
        spec = registry.lookup(config.id)
        set_here, id_at = raw.get(config.id, ({}, config.source))
        lines.append((f"  {config.id}:", id_at))
        for param in spec.params if spec else ():
            if param.name in set_here:
                written, at = set_here[param.name]
                lines.append((f"    {param.name}: {value(written)}", at))
            else:
                lines.append((f"    {param.name}: {value(param.default)}", "default"))
        if "timeout" in set_here:
            lines.append((f"    timeout: {value(set_here['timeout'][0])}", set_here["timeout"][1]))
        else:
            lines.append((f"    timeout: {config.timeout:g}", "default"))
    width = min(max(len(text) for text, _ in lines) + 2, 60)
    head = " extends ".join(shown(str(p)) for p in chain)
    out = [f"# clustercheck profile {prof.name}, resolved: {head}"]
    for text, where in lines:
        out.append(f"{text:<{width}}  # {shown(where)}" if where else text)
    return "\n".join(out) + "\n"


def recorded_profile(transports: Sequence[Transport]) -> str:
    """The profile the replayed fixtures were recorded for (a path is relative to its fixture)."""
    refs: set[str | None] = set()
    for t in transports:
        fixture = t.fixture
        if fixture is None or fixture.profile is None:
            refs.add(None)
            continue
        relative = fixture.path / fixture.profile
        try:
            refs.add(str(relative.resolve()) if relative.is_file() else fixture.profile)
        except (OSError, ValueError):  # not a usable path: let the profile loader say so
            refs.add(fixture.profile)
    if len(refs) != 1 or None in refs:
        raise UsageError("--profile is required (fixtures supply it only when they all name the same one)")
    return str(refs.pop())
