"""Text helpers the formats share (here, not in the package's __init__, so that a format module
imports them without importing the registry that imports it: no import cycle)."""

from __future__ import annotations

import re

__all__ = ["escape_controls"]

# C0 controls but tab and newline, DEL and C1 controls (terminal escapes; XML 1.0 forbids
# most of them), surrogates (undecodable bytes under surrogateescape; not encodable) and
# the noncharacters U+FFFE and U+FFFF (XML 1.0 forbids them).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a raw byte smuggled in by errors="surrogateescape"
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    r"""`text` with control characters spelled out (`\x1b`), tab and newline kept.

    For formats meant for terminals and XML: raw command output in evidence must neither
    drive the terminal nor make the XML invalid. The json formats keep text as is.
    """
    return _CONTROL.sub(_escape_one, text)
