"""Bounded reads of untrusted files and JSON.

Why each rule: a FIFO or device at a state path hangs or floods the reader (O_NONBLOCK + fstat, only
regular files); a symlink planted in a shared directory makes root read or trust somebody else's
file (O_NOFOLLOW); a large file exhausts memory (read at most max_bytes + 1); JSON nested 60,000
deep raises RecursionError out of the json module, and a few hundred levels still break recursive
consumers (renderers, json.dumps deeper in a stack), so nesting is bounded at MAX_JSON_DEPTH.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from fleetctl.errors import DataError

MAX_JSON_DEPTH = 64


def open_regular(path: str | os.PathLike, flags: int = os.O_RDONLY, mode: int = 0o644, *,
                 what: str = "file", error: type = DataError, owners: tuple[int, ...] | None = None) -> int:
    """A descriptor of the regular file at `path`, never through a symlink in its last component,
    never a FIFO or device; with `owners`, its owner must be one of those uids. OSError from open()
    (FileNotFoundError included) is the caller's; the other refusals raise `error`."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: {what} is not a regular file")
        if owners is not None and st.st_uid not in owners:
            raise error(f"{path}: {what} belongs to uid {st.st_uid}, not to "
                        f"{' or '.join(str(o) for o in owners)}: refused")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike, what: str, *, max_bytes: int, missing_ok: bool = False,
               error: type = DataError, owners: tuple[int, ...] | None = None) -> bytes | None:
    """At most `max_bytes` of a regular file (more is an error, never a silent cut); None when the
    file is missing and `missing_ok`."""
    try:
        fd = open_regular(path, what=what, error=error, owners=owners)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise error(f"{path}: no such {what}") from None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last component is a symlink
            raise error(f"{path}: {what} is a symbolic link (never followed)") from None
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    chunks, size = [], 0
    try:
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise error(f"{path}: {what} is larger than {max_bytes} bytes")
    return b"".join(chunks)


def read_text(path: str | os.PathLike, what: str, *, max_bytes: int, missing_ok: bool = False,
              error: type = DataError, owners: tuple[int, ...] | None = None) -> str | None:
    data = read_bytes(path, what, max_bytes=max_bytes, missing_ok=missing_ok, error=error, owners=owners)
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise error(f"{path}: {what} is not UTF-8 text") from None


def json_too_deep(obj: object, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether `obj` nests lists/objects more than `max_depth` deep (iterative: no recursion)."""
    stack = [(obj, 1)] if isinstance(obj, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def loads_json(data: str | bytes, what: str, *, max_depth: int = MAX_JSON_DEPTH,
               error: type = DataError, kind: type | None = None) -> object:
    """json.loads with every failure (bad syntax, bad UTF-8, nesting past the interpreter's stack or
    past `max_depth`, not of `kind`) as one `error` naming `what`."""
    try:
        obj = json.loads(data)
    except RecursionError:
        raise error(f"{what} is JSON nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise error(f"{what} is not valid JSON ({str(exc)[:120]})") from None
    if json_too_deep(obj, max_depth):
        raise error(f"{what} is JSON nested deeper than {max_depth} levels")
    if kind is not None and not isinstance(obj, kind):
        raise error(f"{what} is not a JSON {'object' if kind is dict else kind.__name__}")
    return obj


def read_json(path: str | os.PathLike, what: str, *, max_bytes: int, max_depth: int = MAX_JSON_DEPTH,
              missing_ok: bool = False, error: type = DataError, kind: type | None = None,
              owners: tuple[int, ...] | None = None) -> object:
    """A bounded JSON file (None when missing and `missing_ok`)."""
    data = read_bytes(path, what, max_bytes=max_bytes, missing_ok=missing_ok, error=error, owners=owners)
    if data is None:
        return None
    return loads_json(data, f"{Path(path)}: {what}", max_depth=max_depth, error=error, kind=kind)


def clean_text(value: object, limit: int = 512) -> str:
    """An untrusted value as one line of printable text: stringified, every non-printable character
    (newlines, terminal escapes, bidi overrides: str.isprintable) replaced by a space, cut at `limit`
    characters with an ellipsis. Never raises. Markup escaping is the renderer's (cli/)."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # a hostile __str__ cannot come from JSON; be safe anyway
        text = f"<{type(value).__name__}>"
    if len(text) > limit:
        text = text[:limit] + "\u2026"
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else " " for ch in text)
