"""Node sets: ranges, set operations and clear errors on bad input."""

from __future__ import annotations

import pytest

from fleetctl.errors import UsageError
from fleetctl.nodeset import expand, fold, parse_nodeset


def test_ranges_keep_padding_and_order():
    assert expand("gpu[001-003,010]") == ["gpu001", "gpu002", "gpu003", "gpu010"]
    assert expand("node[1-2],login") == ["login", "node1", "node2"]
    assert len(parse_nodeset("n[01-64,70]")) == 65


def test_set_operations():
    assert str(parse_nodeset("node[1-8]!node[3-4]")) == "node[1-2,5-8]"
    assert str(parse_nodeset("node[1-8]&node[6-12]")) == "node[6-8]"
    assert str(parse_nodeset("node[1-4]^node[3-6]")) == "node[1-2,5-6]"


def test_iterable_of_parts_is_a_union():
    assert str(parse_nodeset(["node[1-2]", " node5 ", ""])) == "node[1-2,5]"
    assert len(parse_nodeset([])) == 0


def test_fold():
    assert fold(["node3", "node1", "node2", "gpu07"]) == "gpu07,node[1-3]"
    assert fold([]) == ""


@pytest.mark.parametrize("text, fragment", [
    ("node[1-", "invalid node set 'node[1-'"),
    ("node[3-1]", "invalid node set 'node[3-1]'"),
    ("node[a-b]", "invalid node set 'node[a-b]'"),
    ("node1 node2", "invalid node set 'node1 node2': whitespace inside a node set"),
])
def test_bad_input_is_a_usage_error(text, fragment):
    with pytest.raises(UsageError) as info:
        parse_nodeset(text)
    assert info.value.message.startswith(fragment)
    assert "\n" not in info.value.message


def test_what_names_the_input():
    with pytest.raises(UsageError, match=r"^invalid --exclude 'x\[': missing bracket"):
        parse_nodeset("x[", what="--exclude")
