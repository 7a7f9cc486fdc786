"""Writing TOML that fleetctl's site-file writers (lab up, site discover) produce: every value written
as data. Strings are TOML basic strings with everything TOML forbids escaped, keys are bare only when
they are plain names, so no text (a node's kernel string, a switch name) can become structure."""

from __future__ import annotations

import json
import re

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_string(text: str) -> str:
    """A TOML basic string holding exactly `text`. JSON's escapes are TOML's for what must be escaped
    (quote, backslash, C0 controls); DEL, which JSON leaves raw and TOML forbids, is escaped too.
    Other characters stay as they are (UTF-8): JSON's ASCII mode would write a character beyond
    U+FFFF as a surrogate pair, which TOML refuses. (A lone surrogate has no escape in either: the
    readers of node documents refuse it.)"""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value) -> str:
    """A scalar, list or inline table as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(x) for x in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(str(k))} = {toml_value(x)}" for k, x in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")
