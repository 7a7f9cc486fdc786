"""Folding of per-host results into clubak-style groups."""

from __future__ import annotations

from fleetctl.fanout.fold import group_results, nodes_by_status, status_counts
from fleetctl.fanout.result import HostResult


def _r(node, status="ok", code=0, out="", err="", error="", duration=0.1):
    return HostResult(node, status, code, out, err, duration, error)


def test_identical_outputs_fold_into_one_node_set():
    results = [_r(f"node{i}", out="6.1.0\n", duration=i / 10) for i in (1, 2, 3, 5)]
    groups = group_results(results)
    assert len(groups) == 1
    assert groups[0].nodeset == "node[1-3,5]" and groups[0].stdout == "6.1.0\n"
    assert groups[0].to_dict()["count"] == 4


def test_different_output_status_or_exit_code_split_groups():
    results = [_r("n1", out="a\n"), _r("n2", out="a\n"), _r("n3", out="b\n"),
               _r("n4", "failed", 1, out="a\n"), _r("n5", "failed", 2, out="a\n"),
               _r("n6", out="a\n", err="warn\n"),
               _r("n7", "unreachable", None, error="connection to 10.0.0.7:22 refused"),
               _r("n8", "unreachable", None, error="connection to 10.0.0.8:22 timed out")]
    groups = group_results(results)
    assert [g.nodeset for g in groups] == ["n[1-2]", "n3", "n6", "n4", "n5", "n7", "n8"]
    # ok groups first, largest first; failures after (nearest the summary line)
    assert [g.status for g in groups] == ["ok", "ok", "ok", "failed", "failed", "unreachable", "unreachable"]


def test_identical_errors_fold():
    results = [_r(f"gpu{i:03d}", "timeout", None, error="command timed out after 5 s") for i in range(1, 9)]
    [group] = group_results(results)
    assert group.nodeset == "gpu[001-008]" and group.status == "timeout"


def test_counts_and_node_sets_by_status():
    results = [_r("n1"), _r("n2"), _r("n3", "failed", 1), _r("n4", "refused", None), _r("n5", "failed", 2)]
    assert status_counts(results) == {"ok": 2, "failed": 2, "refused": 1}
    assert list(status_counts(results)) == ["ok", "failed", "refused"]
    assert nodes_by_status(results) == {"ok": "n[1-2]", "failed": "n[3,5]", "refused": "n4"}


def test_empty():
    assert group_results([]) == [] and status_counts([]) == {}


def test_fifty_unreachable_nodes_are_one_group_however_their_addresses_differ():
    results = [HostResult(f"n{i:02d}", "unreachable", error=f"connect to 10.0.0.{i}:22 timed out after 10 s")
               for i in range(1, 51)]
    results += [HostResult(f"v{i}", "unreachable", error=f"connect to [fd00::{i}]:22 timed out after 10 s")
                for i in (1, 2)]
    results += [HostResult("n52", "hostkey-mismatch", error="HOST KEY MISMATCH for n52: ssh-ed25519 SHA256:x"),
                HostResult("n53", "hostkey-mismatch", error="HOST KEY MISMATCH for n53: ssh-ed25519 SHA256:x"),
                HostResult("n54", "refused", error="connect to 10.0.0.54:22 refused")]
    groups = {g.nodeset: g for g in group_results(results)}
    assert groups["n[01-50]"].error == "connect to <address>:22 timed out after 10 s"
    assert groups["v[1-2]"].error == "connect to [<address>]:22 timed out after 10 s"
    assert groups["n[52-53]"].error == "HOST KEY MISMATCH for <node>: ssh-ed25519 SHA256:x"
    assert groups["n54"].error == "connect to 10.0.0.54:22 refused"  # a group of one keeps its words
    # Other words still split groups; times are not addresses.
    split = group_results([HostResult("a", "error", error="failed at 12:30:45"),
                           HostResult("b", "error", error="failed at 12:30:46")])
    assert [g.error for g in split] == ["failed at 12:30:45", "failed at 12:30:46"]
