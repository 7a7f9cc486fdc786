"""The hooks' fast path (fleetctl.audit.hook_entry) takes only the wrapper's exact command line, and
says, logs and returns what `fleetctl hook ...` through the CLI does, without importing click."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from fleetctl.audit.hook_entry import fast_hook_args

SITE = '[cluster]\nname = "t"\n\n[slurm]\nconf = "{conf}"\n\n[[node_classes]]\nname = "cpu"\nnodes = "n1"\n'
ENV = {"FLEETCTL_SITE": "/etc/fleetctl/site.toml"}


@pytest.mark.parametrize("argv, expected", [
    (["hook", "prolog"], ("prolog", None)),
    (["hook", "epilog", "--budget", "10"], ("epilog", 10.0)),
    (["hook", "healthcheck", "--budget", "2.5"], ("healthcheck", 2.5)),
    (["hook", "prolog", "--budget", "0.1"], None),     # out of range: the CLI's usage error
    (["hook", "prolog", "--budget", "5s"], None),
    (["hook", "prolog", "--budget", "1e3"], None),
    (["hook", "prolog", "--format", "json"], None),
    (["hook", "install", "/etc/slurm"], None),
    (["hook", "prolog", "--budget"], None),
    (["audit", "--local"], None),
    ([], None),
])
def test_only_the_wrappers_command_line_takes_the_fast_path(argv, expected):
    assert fast_hook_args(argv, ENV) == expected


def test_without_a_site_in_the_environment_the_cli_says_so():
    assert fast_hook_args(["hook", "prolog"], {}) is None


def run(tmp_path, entry: str, site: str, *argv: str):
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "FLEETCTL_SITE": site, "SLURMD_NODENAME": "n1",
           "SLURM_JOB_ID": "7", "SLURM_JOB_USER": "root", "FLEETCTL_HOOK_STATE_DIR": str(tmp_path / entry)}
    code = {"fast": "from fleetctl.entry import main; main()",
            "cli": "from fleetctl.cli import main; main()"}[entry]
    return subprocess.run([sys.executable, "-X", "importtime", "-c", code, *argv], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)


def outputs(result):
    err = "\n".join(line for line in result.stderr.splitlines() if not line.startswith("import time:"))
    return result.returncode, result.stdout, err


@pytest.mark.parametrize("hook", ["prolog", "epilog"])  # healthcheck asks slurmctld: the lab tests
def test_both_paths_give_the_same_verdict(tmp_path, hook):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n")
    site = tmp_path / "site.toml"
    site.write_text(SITE.format(conf=conf))
    fast, cli = (run(tmp_path, entry, str(site), "hook", hook, "--budget", "20") for entry in ("fast", "cli"))
    assert outputs(fast) == outputs(cli)
    assert f"fleetctl {hook} node=n1" in fast.stdout
    imports_click = re.compile(r"^import time:.*\|\s+click$", re.M)
    assert not imports_click.search(fast.stderr) and imports_click.search(cli.stderr)  # the point of it


def test_both_paths_report_a_broken_site_file_the_same_way(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text("[cluster\n")
    fast, cli = (run(tmp_path, entry, str(site), "hook", "prolog") for entry in ("fast", "cli"))
    assert outputs(fast) == outputs(cli)
    assert fast.returncode == 3 and "fleetctl: error:" in fast.stderr and "verdict=error" in fast.stderr
