"""Hostile node sets and node names: no shell from `@group`, sizes bounded before expansion, one
node-name grammar (docs/security.md)."""

from __future__ import annotations

import time

import pytest

from fleetctl.config import parse_site
from fleetctl.errors import ConfigError, UsageError
from fleetctl.nodeset import (MAX_NODE_NAME, MAX_NODES, MAX_NODESET_TEXT, check_node_name, contains, fold,
                              is_node_name, parse_nodeset)


def injection(marker) -> str:
    # ClusterShell's default group source runs `sed -n 's/^GROUP:...' FILE` through /bin/sh.
    return f"@x';touch${{IFS}}{marker};'"


def test_a_group_is_a_usage_error_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(UsageError, match=r"node groups \(@name\) are resolved only in a NODESET given on"):
        parse_nodeset(injection(marker))
    with pytest.raises(UsageError, match="resolved only in a NODESET"):
        parse_nodeset(["node1", f"node2,{injection(marker)}"])
    assert not marker.exists()


def test_a_plain_clustershell_nodeset_cannot_resolve_groups_either(tmp_path):
    # Any NodeSet built in a fleetctl process without a resolver gets the source-less one.
    from ClusterShell.NodeSet import NodeSet
    from ClusterShell.NodeUtils import GroupResolverError

    marker = tmp_path / "pwned"
    with pytest.raises(GroupResolverError):
        NodeSet(injection(marker))
    with pytest.raises(GroupResolverError):
        injection(marker) in NodeSet("node1")  # noqa: B015 (membership parses its argument)
    assert not marker.exists()


def test_membership_of_a_non_name_is_false_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    assert contains("node[1-4]", "node2")
    assert not contains("node[1-4]", injection(marker))
    assert not contains("node[1-4]", "node[1-2]")  # a node set is not a node
    assert not contains(injection(marker), "node1")
    assert not marker.exists()


SITE = '[cluster]\nname = "t"\n[[node_classes]]\nname = "c"\nnodes = "{nodes}"\n'


def test_a_group_in_a_site_file_is_a_config_error(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(ConfigError, match=r"node_classes\[0\]\.nodes: invalid node set .*resolved only in a NODESET"):
        parse_site(SITE.format(nodes=injection(marker)), source="s.toml")
    assert not marker.exists()


def test_a_group_as_a_link_end_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    text = (SITE.format(nodes="n[1-2]") + '[[fabric.switches]]\nid = "leaf1"\ntier = 1\n'
            f'[[fabric.links]]\na = "{injection(marker)}:eth0"\nb = "leaf1"\n')
    with pytest.raises(ConfigError, match="names neither a switch"):
        parse_site(text, source="s.toml")
    assert not marker.exists()


# ---------------------------------------------------------------- sizes
@pytest.mark.parametrize("text", [
    "gpu[1-9999999]",
    "gpu[1-99999999999]",  # ClusterShell itself would fail an assert here
    "a[1-1000]b[1-1000]",  # 1,000,000 from two small ranges
    f"gpu[1-{MAX_NODES}],cpu[1-{MAX_NODES}]",
    f"gpu[1-{MAX_NODES * 2}]!gpu[1-{MAX_NODES * 2}]",  # empty result, but both sides would expand
    "gpu[1-9999999/1]",
])
def test_too_many_nodes_is_refused_before_expansion(text):
    start = time.monotonic()
    with pytest.raises(UsageError, match=f"more than {MAX_NODES:,} nodes"):
        parse_nodeset(text)
    assert time.monotonic() - start < 0.5


def test_the_parts_of_a_list_share_one_bound():
    with pytest.raises(UsageError, match="more than"):
        parse_nodeset([f"a[1-{MAX_NODES // 2 + 1}]", f"b[1-{MAX_NODES // 2 + 1}]"])


def test_a_large_but_allowed_set_parses_quickly():
    start = time.monotonic()
    assert len(parse_nodeset(f"gpu[1-{MAX_NODES}]")) == MAX_NODES
    assert len(parse_nodeset("gpu[1-10000/2]")) == 5000
    assert time.monotonic() - start < 5


def test_text_length_is_bounded():
    with pytest.raises(UsageError, match="characters"):
        parse_nodeset("n" + ",n".join(str(i) for i in range(MAX_NODESET_TEXT // 2)))


def test_bad_ranges_are_usage_errors():
    for text in ("gpu[-5--1]", "gpu[a-b]", "gpu[1-2-3]", "gpu[]"):
        with pytest.raises(UsageError, match="invalid node set"):
            parse_nodeset(text)


def test_too_many_nodes_in_a_site_file(tmp_path):
    text = (SITE.format(nodes=f"a[1-{MAX_NODES}]")
            + f'[[node_classes]]\nname = "d"\nnodes = "b[1-10]"\n')
    with pytest.raises(ConfigError, match=r"node_classes\[1\]\.nodes: the site file has more than"):
        parse_site(text, source="s.toml")
    with pytest.raises(ConfigError, match=r"node_classes\[0\]\.nodes: .*more than"):
        parse_site(SITE.format(nodes="gpu[1-9999999]"), source="s.toml")


# ---------------------------------------------------------------- node names
@pytest.mark.parametrize("name", ["gpu01", "node-1.rack_2", "1a", "_x", "a" * MAX_NODE_NAME])
def test_good_node_names(name):
    assert is_node_name(name) and check_node_name(name) == name


@pytest.mark.parametrize("name", ["", "../../../../tmp/x", "a/b", "a..b", "-x", ".x", "a b", "a;b",
                                  "a" * (MAX_NODE_NAME + 1), "a\nb", "a:b", "@x", "é"])
def test_bad_node_names(name):
    assert not is_node_name(name)
    with pytest.raises(UsageError, match="invalid node name"):
        check_node_name(name)


@pytest.mark.parametrize("nodes", ["../../../../tmp/x", "a..b", "-x[1-2]", "n/1", ".hidden"])
def test_bad_names_in_a_site_file_are_config_errors(nodes):
    with pytest.raises(ConfigError, match=r"node_classes\[0\]\.nodes: "):
        parse_site(SITE.format(nodes=nodes), source="s.toml")


def test_bad_names_as_ssh_address_keys():
    text = SITE.format(nodes="n1") + '[access.ssh.addresses]\n"../x" = "10.0.0.1"\n'
    with pytest.raises(ConfigError, match=r"access\.ssh\.addresses: invalid node name '\.\./x'"):
        parse_site(text, source="s.toml")


def test_fold_refuses_what_is_not_a_node_name():
    assert fold(["n2", "n1"]) == "n[1-2]"
    with pytest.raises(UsageError):
        fold(["n1", "x[1-99999999]"])


def test_a_node_name_never_becomes_a_path_outside_the_template():
    from fleetctl.checks.builder import _fill

    assert _fill("/var/lib/fleetctl/{node}/state.json", "gpu01") == "/var/lib/fleetctl/gpu01/state.json"
    with pytest.raises(UsageError):
        _fill("/var/lib/fleetctl/{node}/state.json", "../../../../tmp/x")


def test_the_longest_allowed_texts_parse_quickly():
    texts = ["a," * (MAX_NODESET_TEXT // 2 - 1) + "a",
             ",".join(f"n{i}" for i in range(12_000))[:MAX_NODESET_TEXT].rstrip(",n"),
             "]" + ",a" * (MAX_NODESET_TEXT // 2 - 1)]
    for text in texts:
        assert len(text) <= MAX_NODESET_TEXT
        start = time.monotonic()
        try:
            parse_nodeset(text)
        except UsageError:
            pass
        assert time.monotonic() - start < 2, text[:40]
