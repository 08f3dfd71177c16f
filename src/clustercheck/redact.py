"""One rule set that blanks secrets in everything `clustercheck record` writes.

Recorded outputs are data people send each other: process lists, environments (`env`,
/proc/PID/environ with its NUL separators, `docker inspect`), config files, probe records.
Each rule finds a secret's *value* and the value becomes `<redacted>`; the name beside it
stays, so a reader (and a check replaying the fixture) still sees what was there:

- assignments whose name looks secret: `TOKEN=`, `DB_PASS=`, `SLURM_JWT=`, `AWS_SECRET_ACCESS_KEY=`,
  `spring.datasource.password=` (unquoted, `"quoted"` or `'quoted'`);
- the strongest of those names (password, secret, token, api key ...) as `name: value` at a
  line's start (YAML, HTTP headers: to the end of the line) or quoted (`"name": "value"`, JSON),
  with `Authorization:` and `Cookie:` blanked to the end of the line or of their quotes;
- command-line options: `--password x`, `--token=x`, `--api-key 'x y'`, and MySQL's `-pX`;
- `user:password@` in URLs; `Bearer` tokens; private-key blocks;
- values that are secrets by their shape wherever they stand: JWTs (`eyJ...`), AWS access
  key ids (`AKIA...`), GitHub/GitLab/Hugging Face/Slack/OpenAI tokens.

Every pattern is linear in its input: a pattern that starts with a repeated class is
anchored by a lookbehind on that class (so a long run is tried from its start only), and no
two repetitions can share a character; a value is measured once (a start inside the last one is
skipped). tests/safety/test_record_keeps_no_secrets.py runs each
on hostile inputs and property-tests the rules with secrets embedded in many shapes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

REDACTED = "<redacted>"
_NOT_A_SECRET = {REDACTED, "None", "null", "NULL", "nil", "true", "false", "True", "False"}

# A name is secret when one of its words (split at `_ - .` and camelCase) is a strong one, or
# its last word is a weak one (`sort_keys`, `bos_token_id`, `tokenizer_path` are not secret;
# `DB_PASS`, `AccountingStoragePass`, `AWS_SECRET_ACCESS_KEY`, `SECRET_KEY_BASE` are).
_STRONG = {"PASSWORD", "PASSWORDS", "PASSWD", "SECRET", "SECRETS", "CREDENTIAL", "CREDENTIALS"}
_STRONG |= {"JWT", "APIKEY", "PRIVATEKEY", "PASSPHRASE", "AUTHTOKEN"}
_STRONG_PARTS = ("PASSWORD", "PASSWD", "SECRET", "CREDENTIAL", "PASSPHRASE")  # inside a word too
_WEAK = ("KEY", "PASS", "PWD", "COOKIE", "AUTH", "TOKEN")  # the last word's end: DBPASS, GHTOKEN; not max_tokens
_NOT_VALUE = {"FILE", "PATH", "DIR", "ID", "IDS", "MODE", "TYPE", "NAME", "NUM", "INIT", "LEN", "LENGTH", "SIZE"}
_NOT_VALUE |= {"COUNT", "MIN", "MAX", "ENABLED", "REQUIRED", "FORMAT", "HEADER", "PARAM", "ENV", "VAR", "PREFIX"}
_NOT_SECRET = {"PWD", "OLDPWD", "WCKEY", "TRACKWCKEY", "PKEY", "PUBKEY", "PUBLICKEY", "AUTHTYPE", "AUTHINFO"}
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_STRONG_WORDS = frozenset(_STRONG | {"TOKEN"})
_KEY_KINDS = {"API", "ACCESS", "PRIVATE", "SECRET", "SIGNING", "ENCRYPTION", "MASTER", "SESSION", "LICENSE"}


def _secret_name(name: str, strong: frozenset[str] | None = None) -> bool:
    """Whether the value beside this name is a secret (strong: only strong words count)."""
    words = [w.upper() for w in _WORD.findall(name)]
    if not words or "".join(words) in _NOT_SECRET:
        return False
    if words[-1] in _NOT_VALUE or "PUBLIC" in words:
        return False
    if any(part in w for w in words for part in _STRONG_PARTS):  # PGPASSWORD, MYSECRET, client_secret
        return True
    if strong is not None:  # `api_key`, `X-Api-Key`, `secret_key` count; a bare `key:` does not
        return any(w in strong for w in words) or (words[-1] == "KEY" and "".join(words[-2:-1]) in _KEY_KINDS)
    return any(w in _STRONG for w in words) or words[-1].endswith(_WEAK)


# NAME= (a shell or environment assignment, a Java property, a URL query parameter)
_ASSIGN = re.compile(r"(?<![A-Za-z0-9_.-])(?:-D)?([A-Za-z_][A-Za-z0-9_.-]*)=")  # -Dname= of a JVM
# name: at a line's start (YAML, an HTTP header) or just after a quote ("name": JSON, -H 'name: x')
_COLON = re.compile(r"(?:(?<=[\"'])|^[ \t]*(?:-[ \t]*)?)([A-Za-z_][A-Za-z0-9_.-]*)([\"']?)[ \t]*:[ \t]*", re.M)
# --name / -name (an option; its value follows after `=` or blanks)
_OPTION = re.compile(r"(?<![A-Za-z0-9_-])--?([A-Za-z][A-Za-z0-9_-]*)(=|[ \t]+)?")
# -pSECRET (mysql, mysqldump, mariadb, sshpass: the password glued to -p), on their lines only
_PASSWORD_P_TOOLS = re.compile(r"(?i)mysql|mariadb|sshpass")
_DASH_P = re.compile(r"(?<![^\s\"'=])-p(?=[^\s\"'-])")
# scheme://user:password@
_USERINFO = re.compile(r"://[^\s\x00/@:\"']*:")
_BEARER = re.compile(r"(?<![A-Za-z0-9_])(?i:bearer)[ \t]+")
_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # a JWT (SLURM_JWT, bearer tokens)
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"  # an AWS access key id
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|hf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|sk-[A-Za-z0-9_-]{20,}"  # OpenAI and others
    r")(?![A-Za-z0-9_-])"
)
_KEY_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----")

# where an unquoted value ends: a blank, a NUL or a quote (in JSON/YAML also a separator)
_STOP = re.compile(r"[\s\x00\"']")
_STOP_LIST = re.compile(r"[\s\x00\"',;}\]]")
_QUOTE_END = {q: re.compile(rf"[{q}\n\x00]") for q in "\"'"}
_LINE_END = re.compile(r"[\n\x00]")
_AUTHORITY_END = re.compile(r"[\s\x00/\"'?#]")


def _end(pattern: re.Pattern[str], text: str, start: int) -> int:
    """Index of the first match of `pattern` at or after start, else len(text): O(distance)."""
    m = pattern.search(text, start)
    return m.start() if m else len(text)


def _value(text: str, start: int, stop: re.Pattern[str] = _STOP) -> tuple[int, int] | None:
    """The span of the value that starts at `start` ('quoted' / "quoted": inside the quotes)."""
    if start >= len(text):
        return None
    quote = text[start]
    if quote in _QUOTE_END:
        end = _end(_QUOTE_END[quote], text, start + 1)  # unclosed: to the end of its line
        return (start + 1, end) if end > start + 1 else None
    end = _end(stop, text, start)
    return (start, end) if end > start else None


def _rule(text: str, starts: Iterator[tuple[int, re.Pattern[str] | None]]) -> Iterator[tuple[int, int]]:
    """Value spans from (start, stop pattern) pairs; stop None: to the end of the line.

    A start inside the last span is skipped: its value ends where that span does or before,
    and measuring it again would make `--password=--password=...` quadratic.
    """
    reach = -1
    for start, stop in starts:
        if start < reach:
            continue
        if stop is None:
            end = _end(_LINE_END, text, start)
            span = (start, end) if end > start else None
        else:
            span = _value(text, start, stop)
        if span:
            reach = span[1]
            yield span


def _quote_before(text: str, pos: int) -> str | None:
    """The quote just before `pos`, if any: a value inside a quoted string runs to its end."""
    return text[pos - 1] if pos and text[pos - 1] in _QUOTE_END else None


def _assignments(text: str) -> Iterator[tuple[int, re.Pattern[str] | None]]:
    for m in _ASSIGN.finditer(text):
        if _secret_name(m.group(1)):
            quote = _quote_before(text, m.start())
            yield m.end(), _QUOTE_END[quote] if quote else _STOP  # "NAME=a b" in JSON: to its quote


def _colons(text: str) -> Iterator[tuple[int, re.Pattern[str] | None]]:
    for m in _COLON.finditer(text):
        name = m.group(1)
        if name.upper().replace("-", "_") in ("AUTHORIZATION", "PROXY_AUTHORIZATION", "COOKIE", "SET_COOKIE"):
            quote = _quote_before(text, m.start())
            yield m.end(), _QUOTE_END[quote] if quote else None  # to the end of the line or the quote
        elif _secret_name(name, _STRONG_WORDS):
            quoted = m.group(2) or _quote_before(text, m.start())
            yield m.end(), _STOP_LIST if quoted else None  # JSON: to a separator; YAML, a header: the line


def _options(text: str) -> Iterator[tuple[int, re.Pattern[str] | None]]:
    for m in _OPTION.finditer(text):
        if m.group(2) is not None and _secret_name(m.group(1)):
            if m.group(2) != "=" and text.startswith("-", m.end()):  # the next option, not a value
                continue
            quote = _quote_before(text, m.start()) if m.group(2) == "=" else None
            yield m.end(), _QUOTE_END[quote] if quote else _STOP  # "--password=a b" in JSON: to its quote


def _dash_p(text: str) -> Iterator[tuple[int, re.Pattern[str] | None]]:
    """-pSECRET on the lines that run mysql, mariadb or sshpass (elsewhere -p is a port, -pthread ...)."""
    done = -1
    for m in _PASSWORD_P_TOOLS.finditer(text):
        if m.start() < done:  # this line was searched already
            continue
        start = max(text.rfind("\n", 0, m.start()), text.rfind("\0", 0, m.start())) + 1
        done = _end(_LINE_END, text, m.end())
        for p in _DASH_P.finditer(text, start, done):
            yield p.end(), _STOP


def _plain(pattern: re.Pattern[str], text: str) -> Iterator[tuple[int, re.Pattern[str] | None]]:
    for m in pattern.finditer(text):
        yield m.end(), _STOP


def _spans(text: str) -> Iterator[tuple[int, int]]:
    yield from _rule(text, _assignments(text))
    yield from _rule(text, _colons(text))
    yield from _rule(text, _options(text))
    yield from _rule(text, _dash_p(text))
    yield from _rule(text, _plain(_BEARER, text))
    for u in _USERINFO.finditer(text):  # the password ends at the authority's last @
        at = text.rfind("@", u.end(), _end(_AUTHORITY_END, text, u.end()))
        if at > u.end():
            yield (u.end(), at)
    for shape in _SHAPES.finditer(text):
        yield shape.span()
    pos = 0
    while (m := _KEY_BEGIN.search(text, pos)) is not None:
        end = text.find("-----END ", m.end())
        if end < 0:
            yield (m.end(), len(text))
            break
        yield (m.end(), end)
        pos = end


def redact(text: str) -> str:
    """`text` with every secret value the rules find replaced by `<redacted>`."""
    spans = sorted(_spans(text))
    if not spans:
        return text
    out, pos = [], 0
    for start, end in spans:
        if end <= pos:  # inside a span already blanked
            continue
        start = max(start, pos)
        if text[start:end].rstrip(",;)") in _NOT_A_SECRET:  # redacting twice changes nothing; `api_key=None` stays
            out.append(text[pos:end])
        else:
            out.append(text[pos:start])
            out.append(REDACTED)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command's argv as a recording keeps it: each argument redacted, and the argument after
    an option whose name is secret (`--password`, `x`) blanked as a whole."""
    out = [redact(a) for a in argv]
    for i, arg in enumerate(argv[:-1]):
        m = _OPTION.fullmatch(arg)
        if m and m.group(2) is None and _secret_name(m.group(1)) and not argv[i + 1].startswith("-"):
            out[i + 1] = REDACTED
    return out
