"""Machine-readable drain reasons: `<prefix>:<code> <text>`, e.g. `fleetctl:xid79 gpu3 fell off the bus`.

The prefix marks drains fleetctl made; only those are ever resumed by fleetctl (the NHC convention),
so an operator's manual drain is never undone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetctl.errors import UsageError

# Slurm has no documented limit on a node reason, but slurmdbd stores node events in a TINYTEXT
# column (255 bytes), so longer reasons are cut in sacctmgr/sreport. Stay within it.
MAX_REASON_BYTES = 255
_CODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class DrainReason:
    prefix: str
    code: str
    text: str


def make_reason(prefix: str, code: str, text: str = "") -> str:
    """Build `<prefix>:<code> <text>`, cleaned of control characters and cut to MAX_REASON_BYTES."""
    if not _PREFIX.match(prefix or ""):
        raise UsageError(f"invalid drain prefix {prefix!r}: letters, digits, '_', '.', '-' only")
    if not _CODE.match(code or ""):
        raise UsageError(f"invalid drain code {code!r}: one word of letters, digits, '_', '.', '-'")
    head = f"{prefix}:{code}"
    # Newlines would break every line-oriented Slurm output, including our own parser.
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text or "").split())
    # '[' after a space would look like Slurm's ` [user@time]` suffix to parsers: soften it.
    text = text.replace(" [", " (").replace("]", ")")
    reason = f"{head} {text}" if text else head
    if len(head.encode()) > MAX_REASON_BYTES:
        raise UsageError(f"drain prefix and code are longer than {MAX_REASON_BYTES} bytes")
    return truncate_utf8(reason, MAX_REASON_BYTES)


def truncate_utf8(text: str, limit: int) -> str:
    """Cut `text` to at most `limit` UTF-8 bytes without splitting a character."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore").rstrip()


def parse_reason(reason: str, prefix: str) -> DrainReason | None:
    """The parts of a reason fleetctl wrote with `prefix`, or None for anybody else's reason."""
    if not reason.startswith(f"{prefix}:"):
        return None
    rest = reason[len(prefix) + 1:]
    code, _, text = rest.partition(" ")
    return DrainReason(prefix, code, text)


def is_ours(reason: str, prefix: str) -> bool:
    return parse_reason(reason, prefix) is not None
