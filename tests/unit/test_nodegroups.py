"""Node groups in command-line NODESETs: fleetctl's own resolver (no shell, bounded) checked against
ClusterShell's on ClusterShell's own example group file (tests/data/real/PROVENANCE.md), the site's
static groups, Slurm's groups through a backend, and hostile or broken input."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetctl.errors import ConfigError, UsageError
from fleetctl.nodegroups import NodeGroups, load_group_files
from fleetctl.nodeset import parse_nodeset

EXAMPLE = Path(__file__).parent.parent / "data" / "real" / "clush-groups-cluster.yaml"


def clustershell(expression: str, tmp_path: Path) -> set[str]:
    """ClusterShell's own answer, from a groups.conf whose only source is the example's directory
    (static YAML files: no shell command is configured, so none can run)."""
    from ClusterShell.NodeSet import NodeSet
    from ClusterShell.NodeUtils import GroupResolverConfig

    (tmp_path / "groups.d").mkdir(exist_ok=True)
    (tmp_path / "groups.d" / "cluster.yaml").write_text(EXAMPLE.read_text())
    (tmp_path / "groups.conf").write_text(f"[Main]\nautodir: {tmp_path / 'groups.d'}\ndefault: cluster\n")
    return set(NodeSet(expression, resolver=GroupResolverConfig(str(tmp_path / "groups.conf"))))


@pytest.mark.parametrize("expression", [
    "@cluster:all", "@cluster:io", "@racks:all", "@racks:rack[3-4]", "@cpu:hsw", "@cpu:all",
    "@cluster:compute!@cpu:ivy", "@racks:rack1,@racks:rack2&example[0-4]", "@cpu:ivy^@racks:rack4",
    "example[1-3],@cluster:adm",
])
def test_the_same_nodes_as_clustershell_on_its_own_example(expression, tmp_path):
    groups = NodeGroups(files=[str(EXAMPLE)])
    assert set(parse_nodeset(groups.expand(expression))) == clustershell(expression, tmp_path)


def test_a_group_without_source_is_looked_up_in_every_source():
    groups = NodeGroups(files=[str(EXAMPLE)])
    assert groups.expand("@gpu") == "example[156-159]"  # cluster's gpu
    assert groups.expand("@rack2") == "example[4-5]"  # racks' rack2


def test_site_groups_come_first_and_may_name_file_groups():
    groups = NodeGroups(static={"gpu": "n[1-4]", "both": "@gpu,@racks:rack2"}, files=[str(EXAMPLE)])
    assert groups.expand("@gpu") == "n[1-4]"
    assert groups.expand("@both") == "example[4-5],n[1-4]"
    assert groups.expand("n[1-3]") == "n[1-3]"  # no group: as given


@pytest.mark.parametrize("expression, says", [
    ("@nosuch", "unknown group @nosuch"),
    ("@nosource:x", "unknown group source 'nosource'"),
    ("@loop", "nested more than 8 deep"),
    ("@a;b", "invalid group"),
    ("@gpu,", "nothing next to"),
    ("@big", "more than 100,000 nodes"),
])
def test_bad_groups_are_usage_errors(expression, says):
    groups = NodeGroups(static={"loop": "@loop", "big": "n[1-60000],m[1-60000]"}, files=[str(EXAMPLE)])
    with pytest.raises(UsageError, match=says):
        groups.expand(expression)


def test_broken_group_files_are_config_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("src: [not, a, map]\n")
    with pytest.raises(ConfigError, match="must map group names"):
        load_group_files([str(tmp_path / "*.yaml")])
    (tmp_path / "a.yaml").write_text("src: {g: 'n1'\n")
    with pytest.raises(ConfigError, match="not a YAML group file"):
        load_group_files([str(tmp_path / "*.yaml")])
    (tmp_path / "a.yaml").write_text("!!python/object/apply:os.system ['true']\n")  # safe_load refuses tags
    with pytest.raises(ConfigError, match="not a YAML group file"):
        load_group_files([str(tmp_path / "*.yaml")])


class Backend:
    """The two Slurm reads the resolver makes, as the CLI backend returns them."""

    def nodes(self):
        from fleetctl.slurm.base import SlurmNode

        return [SlurmNode(name=f"n{i}", state="IDLE", partitions=["batch"] if i < 3 else ["maint"])
                for i in range(1, 5)]

    def jobs(self, job_ids):
        from fleetctl.slurm.base import SlurmJob

        return [SlurmJob(job_id="42", state="RUNNING", nodes=["n2", "n3"])] if job_ids == ["42"] else []


def test_slurm_groups_ask_slurm_only_when_named():
    asked = []
    groups = NodeGroups(slurm=lambda: asked.append(1) or Backend())
    assert groups.expand("n9") == "n9" and not asked
    assert groups.expand("@partition:batch") == "n[1-2]"
    assert groups.expand("@slurmjob:42!@slurmpart:maint") == "n2"
    with pytest.raises(UsageError, match="no running job 7"):
        groups.expand("@job:7")
    with pytest.raises(UsageError, match="invalid job id"):
        groups.expand("@job:x1")
    with pytest.raises(UsageError, match="needs Slurm"):
        NodeGroups().expand("@partition:batch")
