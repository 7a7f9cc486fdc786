"""The local transport: real processes, real network namespaces (created here, root only)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from fleetctl.fanout import FanoutOptions, get_transport, run_python
from fleetctl.fanout.payload import json_output


def _local(**changes):
    return get_transport("local", FanoutOptions(**changes))


def test_status_exit_code_output_and_node_variable():
    res = _local().run(["a", "b"], 'echo "hi $FLEETCTL_NODE"; echo e >&2; [ "$FLEETCTL_NODE" = a ]')
    assert [(r.node, r.status, r.exit_code, r.stdout, r.stderr) for r in res] == [
        ("a", "ok", 0, "hi a\n", "e\n"), ("b", "failed", 1, "hi b\n", "e\n")]


def test_argv_is_not_given_to_a_shell():
    [r] = _local().run(["a"], ["echo", "$HOME;", "`id`"])
    assert r.stdout == "$HOME; `id`\n"


def test_missing_program_is_an_error_result():
    [r] = _local().run(["a"], ["/nonexistent/prog"])
    assert r.status == "error" and "cannot run '/nonexistent/prog'" in r.error


def test_hung_command_times_out_others_reported():
    start = time.monotonic()
    res = _local().run(["a", "b", "c"], '[ "$FLEETCTL_NODE" = b ] && sleep 30; echo done', timeout=0.5)
    assert time.monotonic() - start < 3
    assert [r.status for r in res] == ["ok", "timeout", "ok"]
    assert res[1].error == "command timed out after 0.5 s"


def test_killed_by_signal():
    [r] = _local().run(["a"], "kill -TERM $$")
    assert r.status == "failed" and r.exit_code == 143 and "SIGTERM" in r.error


def test_python_payload_gets_script_on_stdin_and_args():
    script = "import json, os, sys\nprint(json.dumps([os.environ['FLEETCTL_NODE'], sys.argv[1:]]))\n"
    res = run_python(_local(), ["x", "y"], script, ["a b", "--flag"])
    assert [json_output(r) for r in res] == [["x", ["a b", "--flag"]], ["y", ["a b", "--flag"]]]


def test_payload_output_that_is_not_json_becomes_an_error():
    [r] = run_python(_local(), ["x"], "print('oops')")
    assert json_output(r) is None and r.status == "error" and "not JSON" in r.error


needs_netns = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="needs root and ip")


@pytest.fixture
def namespaces():
    names = [f"fltest{os.getpid()}-{n}" for n in ("a", "b")]
    made = []
    try:
        for name in names:
            subprocess.run(["ip", "netns", "add", name], check=True)
            made.append(name)
            subprocess.run(["nsenter", f"--net=/run/netns/{name}", "ip", "link", "add", f"d-{name[-1]}",
                            "type", "veth", "peer", "name", f"p-{name[-1]}"], check=True)
        yield names
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "delete", name], check=False)


@needs_netns
def test_each_node_runs_in_its_network_namespace(namespaces):
    template = f"fltest{os.getpid()}-{{node}}"
    res = _local(local_netns=template).run(["a", "b", "c"], "ip -o link show | cut -d: -f2")
    assert res[0].ok and [n.split("@")[0] for n in res[0].stdout.split()] == ["lo", "p-a", "d-a"]
    assert res[1].ok and [n.split("@")[0] for n in res[1].stdout.split()] == ["lo", "p-b", "d-b"]
    assert res[2].status == "unreachable" and "does not exist" in res[2].error
