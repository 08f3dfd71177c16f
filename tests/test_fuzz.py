"""Fuzzing: bad input never produces a traceback.

(a) profile.load() on random text and random YAML structures: a Profile, or a ProfileError
    whose every problem is FILE:LINE: message;
(b) the fixture reader (find_fixtures, ReplayTransport run/read/probe) on damaged fixtures:
    a result, FixtureError, HostError (NotRecorded), or FileNotFoundError for a path the
    fixture records as absent;
(c) `clustercheck run --replay <damaged fixture> --profile base`: exit 64 or 0-3, no traceback.

Each example gets its own temporary folder (function-scoped fixtures are not reset between
hypothesis examples). Example counts keep the file under a minute on two cores.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustercheck import profile, registry
from clustercheck.errors import FixtureError, HostError, NotRecorded, ProfileError, UsageError
from clustercheck.facts.processes import PROCESS_NAMES
from clustercheck.host import CommandResult
from clustercheck.transports.fixture import MANIFEST, Fixture, RecordingTransport, ReplayTransport, find_fixtures

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="clustercheck-fuzz-") as folder:
        yield Path(folder).resolve()


# -- (a) profiles --------------------------------------------------------------------------

CHECK_IDS = [s.id for s in registry.all_checks() if s.id.startswith("node.")]
PARAM_NAMES = sorted({p.name for s in registry.all_checks() for p in s.params} | {"timeout"})

# Pieces of YAML that have broken loaders: tags whose constructors raise plain Python errors,
# anchors, merge keys, directives, control characters, odd line breaks, huge numbers.
TOKENS = [
    *(f"{i}:" for i in CHECK_IDS),
    *(f"{p}: " for p in PARAM_NAMES),
    "checks:",
    "extends: ",
    "extends: base",
    "check_dirs: ",
    "name: ",
    "description: ",
    "\n",
    "\n  ",
    "\n    ",
    "  ",
    "\t",
    "{",
    "}",
    "[",
    "]",
    ",",
    ": ",
    "- ",
    "? ",
    "'",
    '"',
    "#",
    "|",
    ">",
    "&a ",
    "*a",
    "<<: ",
    "<<: *a",
    "!!int ",
    "!!float ",
    "!!bool ",
    "!!str ",
    "!!timestamp ",
    "!!binary ",
    "!!set ",
    "!!omap ",
    "!!pairs ",
    "!!python/object:os.system ",
    "!local ",
    "2024-13-45",
    "2024-01-01",
    "2024-02-30 25:61:00",
    "0x",
    "0o9",
    "0b2",
    "1_000",
    "1:30:00",
    ".nan",
    ".inf",
    "-.inf",
    "-1",
    "0",
    "9" * 400,
    "1e400",
    "8.5",
    "512GiB",
    "1\u212a",
    "lots",
    "eight",
    "true",
    "false",
    "null",
    "~",
    "%YAML 1.1\n",
    "%TAG ! tag:x,2024:\n",
    "---\n",
    "...\n",
    "\x00",
    "\x07",
    "\x1b[31m",
    "\ufeff",
    "\u2028",
    "\x85",
    "\r",
    "\ud7ff",
    "caf\xe9",
]
TEXT = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=6)), max_size=40).map("".join)

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**310),
    st.floats(),  # nan and inf too
    st.text(max_size=12),
    st.sampled_from(["512GiB", "1.9TiB", "500GB", "64G", "-1GiB", "1.2.3", "", "9" * 400 + "EiB", "1\u212a", "\x00"]),
    st.dates(),
    st.binary(max_size=8),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(), st.none()), inner, max_size=4),
    ),
    max_leaves=12,
)
PARAMS = st.one_of(
    st.dictionaries(st.one_of(st.sampled_from(PARAM_NAMES), st.text(max_size=8)), VALUES, max_size=5),
    st.sampled_from([None, True, False]),
    VALUES,
)
CHECKS = st.dictionaries(
    st.one_of(st.sampled_from([*CHECK_IDS, "node.memroy", "gpu.count", "site.x", ""]), st.text(max_size=10)),
    PARAMS,
    max_size=6,
)
EXTENDS = st.one_of(
    st.sampled_from(["base", "gpu-node", "prolog", "nope", "self.yaml", "./self.yaml", "../x.yaml", "", "a" * 300]),
    st.text(max_size=12),
    VALUES,
)
DOCUMENTS = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.one_of(st.text(max_size=10), VALUES),
            "description": st.one_of(st.text(max_size=10), VALUES),
            "extends": EXTENDS,
            "check_dirs": st.one_of(st.lists(st.sampled_from([".", "nope", "", "\x00", "a" * 300])), VALUES),
            "checks": st.one_of(CHECKS, VALUES),
            "colour": VALUES,
        },
    ),
    VALUES,
)

PROBLEM = re.compile(r"(?P<file>.+?):(?P<line>\d+): \S")


def assert_loads_or_reports(path: Path) -> None:
    """load() returns a Profile or raises a ProfileError whose problems are all FILE:LINE: message."""
    try:
        prof = profile.load(str(path))
    except ProfileError as exc:
        assert exc.problems, "a ProfileError with no problem"
        # str.splitlines() breaks at every line break YAML knows (\x85, \u2028 ...) and more
        lines = len(path.read_bytes().decode("utf-8", errors="replace").splitlines()) + 1
        for problem in exc.problems:
            m = PROBLEM.match(problem)
            assert m, f"not FILE:LINE: message: {problem!r}"
            assert "\n" not in problem, f"a problem spans lines: {problem!r}"
            if m["file"] == str(path):
                assert 1 <= int(m["line"]) <= max(lines, 1) + 1, problem
            else:  # a profile it extends (a bundled one): a real file
                assert Path(m["file"]).is_file(), problem
    except UsageError as exc:
        raise AssertionError(f"a UsageError that is not a ProfileError: {exc}") from exc
    else:
        assert prof.path == path
        for config in prof.checks:
            spec = registry.lookup(config.id)
            assert spec is not None
            assert set(config.params) == {p.name for p in spec.params}
            assert config.timeout > 0


@FUZZ
@given(text=TEXT)
def test_load_random_text(text: str) -> None:
    with scratch() as folder:
        path = folder / "self.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        assert_loads_or_reports(path)


@FUZZ
@given(data=st.binary(max_size=200))
def test_load_random_bytes(data: bytes) -> None:
    with scratch() as folder:
        path = folder / "self.yaml"
        path.write_bytes(data)
        assert_loads_or_reports(path)


@FUZZ
@given(doc=DOCUMENTS)
def test_load_random_structures(doc: Any) -> None:
    with scratch() as folder:
        path = folder / "self.yaml"
        path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
        assert_loads_or_reports(path)


@FUZZ
@given(parent=DOCUMENTS, child=DOCUMENTS)
def test_load_random_chains(parent: Any, child: Any) -> None:
    """A child extending a random parent (and, at times, itself through the parent)."""
    with scratch() as folder:
        if isinstance(parent, dict):
            parent = {**parent, "extends": parent.get("extends", "self.yaml")}
        (folder / "parent.yaml").write_text(yaml.safe_dump(parent), encoding="utf-8")
        if isinstance(child, dict):
            child = {**child, "extends": "parent.yaml"}
        path = folder / "self.yaml"
        path.write_text(yaml.safe_dump(child), encoding="utf-8")
        assert_loads_or_reports(path)


# -- (b) fixtures --------------------------------------------------------------------------

PS = ["ps", "-e", "-ww", "-o", "comm=", "-o", "args="]
FILES = {
    "proc/sys/kernel/osrelease": "5.15.0-91-generic\n",
    "proc/sys/kernel/tainted": "4096\n",
    "proc/meminfo": "MemTotal:       16318292 kB\nMemFree:         8000000 kB\nMemAvailable:   12000000 kB\n",
    "sys/devices/system/cpu/online": "0-7\n",
    "sys/devices/system/cpu/present": "0-7\n",
}
ABSENT = "/proc/driver/nvidia/version"


def write_seed(folder: Path) -> Path:
    """A fixture on which `--profile base` passes: every piece the base checks read."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {
        "host": "gpu-a01",
        "profile": "base",
        "transport": "ssh",
        "clustercheck": "0.1.0",
        "recorded_at": "2024-05-01T12:00:00+00:00",
        "note": "seed",
        "expect": {"node.kernel": "ok", "node.cpu": "ok", "node.memory": "ok", "node.services": "ok"},
        "absent": [ABSENT],
    }
    (folder / MANIFEST).write_text(yaml.safe_dump(manifest), encoding="utf-8")
    for name, text in FILES.items():
        (folder / "files" / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / "files" / name).write_text(text, encoding="utf-8")
    ps = folder / "commands" / "ps"
    ps.mkdir(parents=True)
    record = {"argv": PS, "exit_code": 0, "duration_s": 0.01, "timed_out": False}
    (ps / "command.yaml").write_text(yaml.safe_dump(record), encoding="utf-8")
    (ps / "stdout").write_text("slurmd /usr/sbin/slurmd -D\nmunged /usr/sbin/munged\n", encoding="utf-8")
    (ps / "stderr").write_text("", encoding="utf-8")
    names = folder / "commands" / "names"  # what node.services reads: comm and argv[0]'s base name
    names.mkdir()
    record = {"argv": list(PROCESS_NAMES), "exit_code": 0, "duration_s": 0.01, "timed_out": False}
    (names / "command.yaml").write_text(yaml.safe_dump(record), encoding="utf-8")
    (names / "stdout").write_text("slurmd slurmd\nmunged munged\n", encoding="utf-8")
    (folder / "probes").mkdir()
    (folder / "probes" / "nvml.json").write_text(json.dumps({"driver": "550.54.15", "gpus": []}), encoding="utf-8")
    (folder / "probes" / "nvml.v2.error").write_text("NVML_ERROR_LIBRARY_NOT_FOUND\n", encoding="utf-8")
    return folder


TARGETS = [
    MANIFEST,
    "commands/ps/command.yaml",
    "commands/ps/stdout",
    "commands/ps/stderr",
    "commands/extra/command.yaml",
    "commands/extra/stdout",
    *(f"files/{name}" for name in FILES),
    "files" + ABSENT,
    "probes/nvml.json",
    "probes/nvml.error",
    "probes/nvml.v2.error",
    "probes/nvml.v2.json",
]
COMMAND_RECORDS = st.fixed_dictionaries(
    {},
    optional={
        "argv": st.one_of(st.just(PS), st.lists(st.text(max_size=5), max_size=3), VALUES),
        "exit_code": st.one_of(st.integers(-(2**70), 2**70), VALUES),
        "duration_s": st.one_of(st.floats(), st.integers(-5, 10**400), VALUES),
        "timed_out": VALUES,
    },
)
MANIFESTS = st.fixed_dictionaries(
    {},
    optional={
        "host": st.one_of(st.sampled_from(["gpu-a01", "", "[red]x[/red]", "\x1b[2J"]), VALUES),
        "profile": st.one_of(st.sampled_from(["base", "nope", "a" * 300]), VALUES),
        "expect": st.one_of(st.dictionaries(st.sampled_from(CHECK_IDS), st.sampled_from(["ok", "bad"])), VALUES),
        "absent": st.one_of(st.lists(st.sampled_from([ABSENT, "/proc/meminfo"])), VALUES),
        "note": VALUES,
    },
)
JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8,
)
CONTENT = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=64)),
    st.tuples(st.just("text"), TEXT),
    st.tuples(st.just("yaml"), st.one_of(COMMAND_RECORDS, MANIFESTS, VALUES)),
    st.tuples(st.just("json"), st.one_of(JSONISH, st.just("[" * 100_000 + "]" * 100_000))),
    st.tuples(st.just("delete"), st.none()),
    st.tuples(st.just("folder"), st.none()),
    st.tuples(st.just("dangling-link"), st.none()),
)
MUTATIONS = st.lists(st.tuples(st.sampled_from(TARGETS), CONTENT), max_size=4)


def mutate(folder: Path, mutations: list[tuple[str, tuple[str, Any]]]) -> None:
    for target, (kind, value) in mutations:
        path = folder / target
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "bytes":
            path.write_bytes(value)
        elif kind == "text":
            path.write_text(value, encoding="utf-8", errors="surrogatepass")
        elif kind == "yaml":
            path.write_text(yaml.safe_dump(value), encoding="utf-8")
        elif kind == "json":
            path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
        elif kind == "folder":
            path.mkdir()
        elif kind == "dangling-link":
            path.symlink_to(folder / "no-such-target")


def replay_everything(fixture: Fixture, extra_argv: list[str], extra_path: str, extra_probe: str) -> None:
    """Every transport primitive on every piece the fixture holds (and some it does not)."""
    transport = ReplayTransport(fixture)
    assert transport.host == fixture.host
    for argv in [PS, *fixture.commands, extra_argv or ["true"]]:
        for timeout in (0.001, 10.0):
            try:
                result = transport.run(argv, timeout=timeout)
            except NotRecorded as exc:
                assert tuple(argv) not in fixture.commands
                assert str(fixture.path) in str(exc)
                assert "clustercheck record --profile" in str(exc)
            except FixtureError as exc:
                assert str(exc).startswith(str(fixture.path))
            else:
                assert isinstance(result, CommandResult)
                assert result.argv == tuple(argv)
                assert isinstance(result.stdout, str) and isinstance(result.stderr, str)
                assert isinstance(result.exit_code, int) != result.timed_out
                assert 0 <= result.duration_s <= timeout or not result.timed_out
    for path in ["/" + name for name in FILES] + [ABSENT, "/etc/passwd", extra_path]:
        try:
            text = transport.read(path, timeout=1.0)
        except FileNotFoundError:
            assert path in fixture.absent
        except NotRecorded as exc:
            assert path in str(exc)
        except FixtureError as exc:
            assert str(exc).startswith(str(fixture.path))
        else:
            assert isinstance(text, str)
    for name in ["nvml", "nvml.v2", "missing", extra_probe]:
        try:
            record = transport.probe(name, timeout=1.0)
        except FixtureError as exc:
            assert str(exc).startswith(str(fixture.path / "probes"))
        except HostError as exc:  # NotRecorded, or the recorded probe failure
            assert exc.host == fixture.host
        else:
            json.dumps(record)  # JSON-able
    transport.close()


@FUZZ
@given(
    mutations=MUTATIONS,
    nested=st.booleans(),
    extra_argv=st.lists(st.text(max_size=5), max_size=3),
    extra_path=st.one_of(st.text(max_size=20), st.just("/" + "a" * 5000)),
    extra_probe=st.text(alphabet="abc.-_", min_size=1, max_size=8),
)
def test_fixture_reader(
    mutations: list[Any], nested: bool, extra_argv: list[str], extra_path: str, extra_probe: str
) -> None:
    with scratch() as root:
        folder = write_seed(root / "cluster" / "gpu-a01" if nested else root / "gpu-a01")
        mutate(folder, mutations)
        try:
            fixtures = find_fixtures([root / "cluster" if nested else folder])
        except FixtureError as exc:
            assert str(exc).startswith(str(root)), exc
            return
        assert [f.path for f in fixtures] == [folder]
        replay_everything(fixtures[0], extra_argv, extra_path, extra_probe)


def test_fixture_seed_replays_cleanly() -> None:
    """The seed the fuzzers damage is itself a good fixture, so damage is what they test."""
    with scratch() as root:
        (fixture,) = find_fixtures([write_seed(root)])
        transport = ReplayTransport(fixture)
        assert transport.run(PS, timeout=5).stdout.startswith("slurmd")
        assert transport.run(PS, timeout=0.001).timed_out
        assert transport.read("/proc/meminfo", timeout=1).startswith("MemTotal")
        assert transport.probe("nvml", timeout=1) == {"driver": "550.54.15", "gpus": []}
        cases: list[tuple[Callable[[], object], type[Exception]]] = [
            (lambda: transport.read(ABSENT, timeout=1), FileNotFoundError),
            (lambda: transport.read("/etc/passwd", timeout=1), NotRecorded),
            (lambda: transport.probe("nvml.v2", timeout=1), HostError),
            (lambda: transport.probe("missing", timeout=1), NotRecorded),
            (lambda: transport.run(["true"], timeout=1), NotRecorded),
        ]
        for call, error in cases:
            try:
                call()
            except error:
                pass
            else:
                raise AssertionError(f"expected {error.__name__}")


@settings(max_examples=50, deadline=None)
@given(
    duration=st.one_of(st.integers(10**310, 10**400), st.sampled_from([".nan", ".inf", "-1", "true", "'1'"])),
)
def test_fixture_command_durations_are_checked(duration: Any) -> None:
    with scratch() as root:
        folder = write_seed(root)
        (folder / "commands/ps/command.yaml").write_text(
            f"argv: {json.dumps(PS)}\nexit_code: 0\nduration_s: {duration}\n", encoding="utf-8"
        )
        try:
            find_fixtures([folder])
        except FixtureError as exc:
            assert (
                str(exc) == f"{folder}/commands/ps/command.yaml: `duration_s:` must be a number of seconds (0 or more)"
            )
        else:
            raise AssertionError("a bad duration_s was accepted")


@pytest.mark.parametrize(
    ("target", "content", "message"),
    [
        (
            MANIFEST,
            "host: a\nrecorded_at: 2024-13-45\n",
            "fixture.yaml: YAML error: ValueError: month must be in 1..12",
        ),
        (MANIFEST, "host: a\nnote: !!float \n", "fixture.yaml: YAML error: IndexError: string index out of range"),
        (MANIFEST, "host: a\nnote: !!bool maybe\n", "fixture.yaml: YAML error: KeyError: 'maybe'"),
        (MANIFEST, "host: [a\n", "fixture.yaml:2: YAML syntax error: "),
        (MANIFEST, "host: a\nabsent: /proc/x\n", "`absent:` is a list of file paths"),
        (MANIFEST, "host: a\nexpect: {node.cpu: good}\n", "`expect:` maps check ids to ok|warn|fail|skip|error"),
        ("commands/ps/command.yaml", f"argv: {PS}\ntimed_out: 'no'\n", "`timed_out:` must be true or false"),
        ("commands/ps/command.yaml", f"argv: {PS}\nexit_code:\n", "`exit_code:` must be an integer (or null when"),
        ("commands/ps/command.yaml", f"argv: {PS}\nexit_code: 0\nduration_s: .nan\n", "`duration_s:` must be"),
        ("commands/ps/command.yaml", "argv: []\n", "`argv:` must be a non-empty list of strings"),
        ("commands/ps/command.yaml", b"argv: [\xff]\n", "command.yaml: cannot be read: 'utf-8' codec"),
    ],
)
def test_fixture_damage_is_a_fixture_error(target: str, content: str | bytes, message: str) -> None:
    with scratch() as root:
        folder = write_seed(root)
        path = folder / target
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        with pytest.raises(FixtureError) as info:
            find_fixtures([folder])
        assert str(info.value).startswith(f"{path}")
        assert message in str(info.value)


def test_fixture_pieces_that_cannot_be_read() -> None:
    with scratch() as root:
        folder = write_seed(root)
        (folder / "commands/ps/stdout").unlink()
        (folder / "commands/ps/stdout").mkdir()
        (folder / "files/proc/meminfo").unlink()
        (folder / "files/proc/meminfo").mkdir()
        (folder / "probes/deep.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
        (folder / "probes/bad.json").write_bytes(b'{"driver": "\xff"}')
        (folder / "probes/null.json").write_text("", encoding="utf-8")
        transport = ReplayTransport(find_fixtures([folder])[0])
        with pytest.raises(FixtureError, match=rf"^{re.escape(str(folder))}/commands/ps/stdout: cannot be read: "):
            transport.run(PS, timeout=5)
        with pytest.raises(NotRecorded, match="has no recording of the file /proc/meminfo; re-record it with"):
            transport.read("/proc/meminfo", timeout=1)
        with pytest.raises(NotRecorded, match="has no recording of the file"):
            transport.read("/proc/\0/" + "x" * 5000, timeout=1)
        with pytest.raises(FixtureError, match=r"probes/deep.json: not valid JSON: maximum recursion depth"):
            transport.probe("deep", timeout=1)
        with pytest.raises(FixtureError, match=r"probes/bad.json: not valid JSON: 'utf-8' codec can't decode"):
            transport.probe("bad", timeout=1)
        with pytest.raises(FixtureError, match=r"probes/null.json: not valid JSON: Expecting value"):
            transport.probe("null", timeout=1)


def test_probe_names_with_dots_are_kept_apart() -> None:
    """nvml.v1 and nvml.v2 were both probes/nvml.json (Path.with_suffix), recording and replay."""
    with scratch() as root:
        seed = write_seed(root / "seed")
        (seed / "probes/nvml.v1.json").write_text('{"v": 1}', encoding="utf-8")
        (seed / "probes/nvml.v2.error").unlink()
        (seed / "probes/nvml.v2.json").write_text('{"v": 2}', encoding="utf-8")
        recorder = RecordingTransport(ReplayTransport(find_fixtures([seed])[0]), root / "copy")
        assert [recorder.probe(n, timeout=1) for n in ("nvml.v1", "nvml.v2", "nvml")] == [
            {"v": 1},
            {"v": 2},
            {"driver": "550.54.15", "gpus": []},
        ]
        recorder.write_manifest(profile="base", version="0.1.0", note="", expect={})
        assert sorted(p.name for p in (root / "copy/probes").iterdir()) == ["nvml.json", "nvml.v1.json", "nvml.v2.json"]
        replay = ReplayTransport(find_fixtures([root / "copy"])[0])
        assert replay.probe("nvml.v1", timeout=1) == {"v": 1}
        assert replay.probe("nvml.v2", timeout=1) == {"v": 2}


# -- (c) end to end --------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=MUTATIONS, fmt=st.sampled_from(["table", "json", "jsonl", "junit", "prometheus"]))
def test_cli_replay_of_a_damaged_fixture(run_cli: Any, mutations: list[Any], fmt: str) -> None:
    with scratch() as root:
        folder = write_seed(root / "fixture")
        mutate(folder, mutations)
        proc = run_cli("run", "--replay", folder, "--profile", "base", "--format", fmt, "--verbose", cwd=root)
        assert "Traceback" not in proc.stderr + proc.stdout
        assert proc.returncode in (0, 1, 2, 3, 64), (proc.returncode, proc.stderr)
        if proc.returncode == 64:
            assert proc.stderr.startswith("clustercheck: error: ")
            assert proc.stdout == ""
        else:
            assert proc.stdout


@pytest.mark.parametrize(
    ("recorded", "code", "message"),
    [
        ("base", 0, ""),
        ("nope", 64, "clustercheck: error: profile 'nope' not found"),
        ('"a\\0b"', 64, "clustercheck: error: profile 'a\\x00b' not found"),
        ("a" * 300, 64, "clustercheck: error: profile 'aaa"),
        ("[base]", 64, "clustercheck: error: --profile is required"),
    ],
)
def test_cli_replay_takes_the_profile_from_the_fixture(run_cli: Any, recorded: str, code: int, message: str) -> None:
    with scratch() as root:
        folder = write_seed(root / "fixture")
        manifest = (folder / MANIFEST).read_text(encoding="utf-8").replace("profile: base", f"profile: {recorded}")
        (folder / MANIFEST).write_text(manifest, encoding="utf-8")
        proc = run_cli("run", "--replay", folder, cwd=root)
        assert "Traceback" not in proc.stderr
        assert proc.returncode == code, proc.stderr
        assert proc.stderr.startswith(message)


def test_cli_replay_of_the_seed_passes(run_cli: Any) -> None:
    with scratch() as root:
        proc = run_cli("run", "--replay", write_seed(root), "--profile", "base", "--format", "json", cwd=root)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        report = json.loads(proc.stdout)
        statuses = {c["id"]: c["status"] for c in report["hosts"]["gpu-a01"]["checks"]}
        assert statuses == {"node.kernel": "ok", "node.cpu": "ok", "node.memory": "ok", "node.services": "ok"}
