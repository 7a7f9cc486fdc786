"""Folding in `act log` and `spares status` (issue 23): records alike but for their node are one
line; --wide and JSON keep one per node."""

from __future__ import annotations

from fleetctl.cli.act.common import folded_lines, line
from fleetctl.cli.spares.status import member_rows


def record(i: int, node: str, why: str | None = None, phase: str = "done") -> dict:
    return {"id": f"A{i:04d}", "phase": phase, "action": "drain", "policy": "xid-drain", "time": float(i),
            "detection": {"code": "gpu.xid.79"}, "targets": {"nodes": [node]},
            "why": why if why is not None else f"drained {node}: Xid 79 on {node}"}


def test_twenty_drains_alike_are_one_line_with_their_ids_and_nodes():
    recs = [record(i, f"gpu{i:03d}") for i in range(1, 21)]
    lines = folded_lines(recs)
    assert len(lines) == 1
    assert "A0001..A0020 (20)" in lines[0] and "gpu[001-020]" in lines[0]
    assert "drained <node>: Xid 79 on <node>" in lines[0]


def test_different_reasons_and_phases_stay_apart_and_a_single_record_is_its_own_line():
    recs = [record(1, "gpu001"), record(2, "gpu002"), record(3, "gpu003", why="budget exhausted", phase="refused")]
    lines = folded_lines(recs)
    assert len(lines) == 2
    assert lines[1] == line(recs[2])


def test_a_node_name_inside_another_name_is_not_generalized():
    recs = [record(1, "gpu1", why="gpu1 and gpu10 disagree"), record(2, "gpu2", why="gpu2 and gpu10 disagree")]
    [folded] = folded_lines(recs)
    assert "<node> and gpu10 disagree" in folded


def member(node: str, verdict: str = "pass", age: float | None = 60.0, free: bool = True) -> dict:
    return {"node": node, "state": "IDLE+RESERVED", "in_use": False, "free": free, "verdict": verdict,
            "audit_age_s": age}


def test_spare_members_alike_are_one_row_with_the_ages_range():
    members = [member(f"spare{i}", age=60.0 + i) for i in range(1, 9)] + [member("spare9", "fail", None, False)]
    rows = member_rows(members, wide=False)
    assert rows == [("spare[1-8] (8)", "IDLE+RESERVED", "free", "pass", "61-68 s"),
                    ("spare9", "IDLE+RESERVED", "unusable", "fail", "-")]
    assert len(member_rows(members, wide=True)) == 9
