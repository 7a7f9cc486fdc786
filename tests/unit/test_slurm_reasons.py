"""Drain reasons: `<prefix>:<code> <text>`, cleaned and cut within Slurm's stored length."""

from __future__ import annotations

import pytest

from fleetctl.errors import UsageError
from fleetctl.slurm.reasons import MAX_REASON_BYTES, is_ours, make_reason, parse_reason


def test_make_and_parse():
    reason = make_reason("fleetctl", "xid79", "gpu3 fell off the bus")
    assert reason == "fleetctl:xid79 gpu3 fell off the bus"
    parsed = parse_reason(reason, "fleetctl")
    assert (parsed.code, parsed.text) == ("xid79", "gpu3 fell off the bus")
    assert make_reason("fleetctl", "nic-down") == "fleetctl:nic-down"


def test_control_characters_and_brackets_are_cleaned():
    reason = make_reason("fleetctl", "ecc", "line1\nline2\t [root@x] end")
    assert reason == "fleetctl:ecc line1 line2 (root@x) end"


def test_truncated_within_bytes_without_splitting_characters():
    reason = make_reason("fleetctl", "temp", "é" * 400)
    assert len(reason.encode()) <= MAX_REASON_BYTES
    assert reason.startswith("fleetctl:temp é")
    reason.encode().decode()  # still valid UTF-8


@pytest.mark.parametrize("prefix, code", [("fleet ctl", "x"), ("", "x"), ("fleetctl", "two words"),
                                          ("fleetctl", ""), ("fleetctl", "a:b")])
def test_bad_prefix_or_code(prefix, code):
    with pytest.raises(UsageError):
        make_reason(prefix, code, "t")


def test_only_our_prefix_is_ours():
    assert is_ours("fleetctl:xid79 x", "fleetctl")
    assert not is_ours("fleetctlx:xid79", "fleetctl")
    assert not is_ours("maintenance by alice", "fleetctl")
    assert not is_ours("", "fleetctl")
    assert is_ours("nhc:disk", "nhc") and not is_ours("nhc:disk", "fleetctl")
