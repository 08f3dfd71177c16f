"""Promise: `clustercheck record` keeps no secrets, and its redaction cannot be made to hang.

Fixtures are sent to vendors and colleagues. One rule set (clustercheck.redact) blanks every
value it recognises as a secret in all that record writes: command output, files, probe
records. It is property-tested here with secrets embedded in many shapes, run over hostile
inputs that would take a super-linear pattern minutes, and exercised through the CLI on a
real recording of this machine's environment and process output.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import cli

from clustercheck import redact as redaction
from clustercheck.redact import REDACTED, redact

CORE = "S3cr3tZ"  # in every generated secret; the surrounding text never holds a capital Z
PUNCT = "!#$%&()*+,-./:;<=>?@[]^_`{|}~"
WORD = st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXY0123456789" + PUNCT))
SPACED = st.text(alphabet=st.sampled_from("abcdefXY0189 " + PUNCT), max_size=12)
URLSAFE = st.text(alphabet=st.sampled_from("abcdefXY0189!$&()*+,-.;=_~@"), max_size=12)
CONTEXT = st.text(alphabet=st.sampled_from("abcxyz ABC012=-_/.:,;\"'\n\t"), max_size=30)
SEPARATOR = st.sampled_from([" ", "\n", "\t", "\0", "  "])
NAMES = st.sampled_from(
    [
        "TOKEN",
        "PASSWORD",
        "KEY",
        "SECRET",
        "HF_TOKEN",
        "GITHUB_TOKEN",
        "DB_PASS",
        "DB_PASSWORD",
        "MYSQL_PWD",
        "SLURM_JWT",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "API_KEY",
        "SECRET_KEY_BASE",
        "StoragePass",
        "AccountingStoragePass",
        "client_secret",
        "db.password",
        "CREDENTIALS",
    ]
)
OPTIONS = st.sampled_from(["--password", "--passwd", "--token", "--api-key", "--secret", "--db-pass", "-password"])


def _secret(alphabet: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(lambda a, b: a + CORE + b, alphabet, alphabet)


def _no_leading_dash(s: str) -> str:
    return s.lstrip("-") or "x"


SHAPES = st.one_of(
    st.builds(lambda n, s: f"{n}={s}", NAMES, _secret(WORD)),
    st.builds(lambda n, s: f'{n}="{s}"', NAMES, _secret(SPACED)),
    st.builds(lambda n, s: f"{n}='{s}'", NAMES, _secret(SPACED)),
    st.builds(lambda n, s: f"export {n}={s}", NAMES, _secret(WORD)),
    st.builds(lambda n, s: f"PATH=/usr/bin\0{n}={s}\0HOME=/home/alice", NAMES, _secret(WORD)),  # /proc/PID/environ
    st.builds(lambda n, s: f'"Env": ["LANG=C", "{n}={s}"]', NAMES, _secret(SPACED)),  # docker inspect
    st.builds(lambda n, s: f"-D{n}={s}", NAMES, _secret(WORD)),  # a JVM property
    st.builds(lambda o, s: f"{o} {_no_leading_dash(s)}", OPTIONS, _secret(WORD)),
    st.builds(lambda o, s: f"{o}={s}", OPTIONS, _secret(WORD)),
    st.builds(lambda o, s: f"{o} '{s}'", OPTIONS, _secret(SPACED)),
    st.builds(lambda o, s: f'{o}="{s}"', OPTIONS, _secret(SPACED)),
    st.builds(lambda o, s: f'"args": ["{o}={s}", "-v"]', OPTIONS, _secret(SPACED)),  # an argv as JSON
    st.builds(lambda s: f"mysql -u root -p{_no_leading_dash(s)} db", _secret(WORD)),
    st.builds(lambda s: f"/usr/bin/sshpass -p{_no_leading_dash(s)} ssh -p22 host", _secret(WORD)),
    st.builds(lambda s: f"https://alice:{s}@db.example:5432/x?y=1", _secret(URLSAFE)),
    st.builds(lambda s: f"git clone https://oauth2:{s}@gitlab.example/a/b.git", _secret(URLSAFE)),
    st.builds(lambda s: f"Authorization: Bearer {s}", _secret(WORD)),
    st.builds(lambda s: f"curl -H 'Authorization: Basic {s}' https://x", _secret(SPACED)),
    st.builds(lambda s: f"got a Bearer {s} back", _secret(WORD)),
    st.builds(lambda s: f'{{"password": "{s}", "user": "u"}}', _secret(SPACED)),
    st.builds(lambda s: f"{{'api_key': '{s}'}}", _secret(SPACED)),
    st.builds(lambda s: f"\n  secret: {s}", _secret(SPACED)),  # YAML and HTTP headers: at a line's start
    st.builds(lambda s: f"\nX-Api-Key: {s}", _secret(SPACED)),
    st.builds(
        lambda s: f"-----BEGIN OPENSSH PRIVATE KEY-----\n{s}\n{s}\n-----END OPENSSH PRIVATE KEY-----", _secret(WORD)
    ),
)


@settings(max_examples=600, deadline=None)
@given(shape=SHAPES, before=CONTEXT, after=CONTEXT, sep1=SEPARATOR, sep2=SEPARATOR)
def test_secrets_in_every_shape_are_blanked(shape: str, before: str, after: str, sep1: str, sep2: str) -> None:
    text = before + sep1 + shape + sep2 + after
    out = redact(text)
    assert CORE not in out, (text, out)
    assert REDACTED in out
    assert redact(out) == out  # redacting a recording again changes nothing


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("abcdefXYZ0129 =-_:/@.'\"\n\0"), max_size=60))
def test_redaction_is_idempotent_on_any_text(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


@pytest.mark.parametrize(
    "value",
    [
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjE3MDAwMDAwMDAsInN1biI6InJvb3QifQ.c2lnbmF0dXJl",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "hf_abcdefghijklmnopqrstuvwxyzABCDEF",
        "glpat-abcdefghijklmnopqrst",
        "xoxb-1234567890-abcdefghij",
        "sk-abcdefghijklmnopqrstuvwxyz012345",
    ],
)
def test_tokens_known_by_their_shape_are_blanked_anywhere(value: str) -> None:
    assert redact(f"job 42 printed {value} and exited") == f"job 42 printed {REDACTED} and exited"


@pytest.mark.parametrize(
    "line",
    [
        # real lines from the recorded fixtures and corpus: nothing here is a secret
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin PWD=/home/alice OLDPWD=/ SHLVL=1",
        "nvidia-persiste nvidia-persistenced",
        "sshd            sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups",
        "ssh -p 22 -o StrictHostKeyChecking=yes gpu001",
        "ssh -p2222 gpu001; gcc -pthread -pipe x.c; nvidia-smi -i 0 -pm 1; export -p",
        "mkdir -p /scratch/ckpt && rsync -a src/ dst/",
        "TrackWCKey=yes",
        "AuthType=auth/munge CryptoType=crypto/munge",
        "print(json.dumps(OUT, sort_keys=True))",
        "max_total_tokens=None, max_prefill_tokens=16384, bucket_time_to_first_token=None, tokenizer_path='/m/'",
        '"bos_token_id": 128000, "eos_token_id": 128001,',
        "--num_key_value_heads=8 --tokenizer=hf-internal-testing/llama-tokenizer",
        "# CONFIG PASSWD: [BOOL]",
        "config passwd = yes",
        "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>",
        "api_key=None, admin_api_key=None",
        "https://gitlab.example:8443/group/repo.git",
    ],
)
def test_ordinary_lines_are_left_as_they_are(line: str) -> None:
    assert redact(line) == line


# -- no pattern is super-linear on hostile input -------------------------------------------

N = 200_000
HOSTILE = {
    "letters": "a" * N,
    "one identifier": "A_" * (N // 2),
    "assignments": "PASSWORD=" * (N // 9),
    "assignments, no value": "x=" * (N // 2),
    "quotes opened": 'PASSWORD="' * (N // 10),
    "nested options": "--password=" * (N // 11),
    "option names": "--a-" * (N // 4),
    "dashes": "-" * N,
    "-p glued": "mysql" + "=-p" * (N // 3),
    "-p tools": "mysql -p" * (N // 8),
    "urls": "://a:" * (N // 5),
    "url userinfo, no @": "://" + "a:" * (N // 2),
    "ats": "://a:" + "@" * N,
    "colons": "password:" * (N // 9),
    "json keys": '"password":' * (N // 11),
    "quoted keys, never closed": '"' + "a" * N,
    "bearers": "Bearer " * (N // 7),
    "jwt prefix": "eyJ" + "a" * N,
    "jwt segments": "eyJ" + "aaaaaaaa." * (N // 9),
    "key begins": "-----BEGIN PRIVATE KEY-----" * (N // 27),
    "aws-ish": "AKIA" * (N // 4),
    "slack-ish": "xoxb-" + "a-" * (N // 2) + "_",
    "dotted name": "a." * (N // 2) + "=",
    "camel name": "aB" * (N // 2) + "=",
    "blanks then colon": "password" + " " * N,
    "newlines": "\n" * N,
    "nul environ": "A=b\0" * (N // 4),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_redaction_is_linear_on_hostile_input(name: str) -> None:
    """Each input makes a super-linear pattern take minutes; linear ones take milliseconds."""
    text = HOSTILE[name]
    start = time.process_time()
    redact(text)
    for value in vars(redaction).values():  # and every pattern of the rule set on its own
        if isinstance(value, re.Pattern):
            for _ in value.finditer(text):
                pass
    assert time.process_time() - start < 5.0, f"{name}: {time.process_time() - start:.1f} s of CPU"


# -- through the CLI, as a site records a node -------------------------------------------


def test_record_keeps_no_secret_from_commands_environments_and_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "SLURM_JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJyb290In0.S3cr3tZjwtsig",
        "DB_PASS": "S3cr3tZdbpass",
        "TOKEN": "S3cr3tZbare",
        "AWS_SECRET_ACCESS_KEY": "S3cr3tZwJalrXUtnFEMI",
        "AWS_ACCESS_KEY_ID": "AKIAS3CR3TZEXAMPLE12",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    conf = tmp_path / "etc-slurm"
    conf.mkdir()
    (conf / "slurm.conf").write_text("ClusterName=c\nAccountingStoragePass=S3cr3tZstorage\nNodeName=n1 CPUs=1\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / "leaky.py").write_text(
        "from clustercheck import Host, Result, check, ok\n"
        "@check\n"
        "def show(host: Host) -> Result:\n"
        "    '''Prints the environment and a command line full of secrets.'''\n"
        "    host.run('env')\n"
        "    host.run('sh', '-c', 'tr \"\\\\0\" \"\\\\n\" < /proc/self/environ')\n"
        "    host.run('echo', 'mysql -pS3cr3tZmysql --password \"S3cr3tZ two\" --token=S3cr3tZtok '\n"
        "             'https://u:S3cr3tZurl@h/x Authorization: Bearer S3cr3tZbearer')\n"
        f"    host.read({str(conf / 'slurm.conf')!r})\n"
        "    return ok('read')\n"
    )
    profile = tmp_path / "p.yaml"
    profile.write_text(f"check_dirs: [{site}]\nchecks:\n  leaky.show:\n")
    out = tmp_path / "fx"
    proc = cli("record", "--profile", profile, "--local", "--out", out)
    assert proc.returncode == 0, proc.stderr
    recorded = {p: p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()}
    assert len(recorded) >= 10
    leaks = {str(p.relative_to(out)) for p, text in recorded.items() if CORE in text or "S3CR3TZ" in text}
    assert leaks == set()
    everything = "".join(recorded.values())
    assert "SLURM_JWT=<redacted>" in everything and "DB_PASS=<redacted>" in everything
    assert "AccountingStoragePass=<redacted>" in everything
