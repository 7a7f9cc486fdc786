"""The srun transport's command line and its parsing of `--label` output.

The sample below is what Slurm 22.05's srun printed in the lab for a 3-node run of
`echo out $FLEETCTL_NODE; printf no-newline >&2; [ $FLEETCTL_NODE = node2 ] && exit 3; true`.
Running srun for real is in tests/integration/test_exec_lab.py.
"""

from __future__ import annotations

from fleetctl.fanout import Command, FanoutOptions
from fleetctl.fanout.srun import WRAPPER, SrunTransport, parse_labelled

STDOUT = ("0: \x1ffleetctl-node:node1\n2: \x1ffleetctl-node:node3\n1: \x1ffleetctl-node:node2\n"
          "0: out node1\n2: out node3\n1: out node2\n")
STDERR = ("2: no-newline\x1ffleetctl-rc:0\n1: no-newline\x1ffleetctl-rc:3\n"
          "0: no-newline\x1ffleetctl-rc:0\n")


def test_labelled_output_maps_tasks_to_nodes():
    tasks = {t.node: t for t in parse_labelled(STDOUT, STDERR).values()}
    assert sorted(tasks) == ["node1", "node2", "node3"]
    assert tasks["node2"].rc == 3 and tasks["node1"].rc == 0
    assert tasks["node3"].stdout() == "out node3\n"
    assert tasks["node1"].stderr() == "no-newline"  # no newline invented for stderr


def test_wide_labels_and_blank_lines():
    out = "".join(f"{i:2d}: \x1ffleetctl-node:n{i}\n" for i in range(12)) + " 7: \n 7: x\n"
    err = "".join(f"{i:2d}: \x1ffleetctl-rc:0\n" for i in range(12))
    tasks = {t.node: t for t in parse_labelled(out, err).values()}
    assert len(tasks) == 12 and tasks["n7"].stdout() == "\nx\n"


def test_task_without_rc_marker_has_no_status():
    tasks = parse_labelled("0: \x1ffleetctl-node:n1\n0: started\n", "srun: error: something\n")
    assert tasks[0].node == "n1" and tasks[0].rc is None and tasks[0].stdout() == "started\n"


def test_command_line_never_pastes_the_command():
    t = SrunTransport(FanoutOptions(srun_partition="gpu", srun_extra_args=("--reservation=maint",),
                                    connect_timeout=10))
    argv = t.build_argv(["node1", "node2", "node3", "node5"], Command(argv=("echo", "a b; rm x")),
                        timeout=100, stdin=True)
    assert argv[:2] == ["srun", "--nodelist=node[1-3,5]"] and "--nodes=4" in argv
    assert "--ntasks-per-node=1" in argv and "--label" in argv and "--input=all" in argv
    assert "--time=3" in argv and "--partition=gpu" in argv and "--reservation=maint" in argv
    i = argv.index("-c")
    assert argv[i + 1] == WRAPPER and argv[i + 2:] == ["fleetctl-srun", "100.00", "10000", "echo", "a b; rm x"]


def _wrapper(command: list[str], terminate_after: float | None, deadline: float = 20) -> tuple[str, str]:
    """The task wrapper run by /bin/sh as slurmstepd runs it, SIGTERM sent to its process group."""
    import os
    import signal
    import subprocess
    import time

    from fleetctl.fanout.srun import WRAPPER

    proc = subprocess.Popen(["/bin/sh", "-c", WRAPPER, "fleetctl-srun", f"{deadline:.2f}", str(round(deadline * 100)),
                             *command], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    if terminate_after is not None:
        time.sleep(terminate_after)
        os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    return out, err


def test_a_command_stopped_by_the_timeout_never_reports_success():
    # The shell's sleep dies of srun's forwarded SIGTERM; the shell itself ignores it and goes on to
    # `echo done`. Without the wrapper's trap that ended as rc 0: a hung node reported `ok`.
    out, err = _wrapper(["/bin/sh", "-c", "trap '' TERM; sleep 5; echo done"], terminate_after=0.5)
    tasks = _tasks(out, err)
    assert tasks[0].rc == 143 and not tasks[0].timed_out and "done" in tasks[0].stdout()


def _tasks(out: str, err: str):
    return parse_labelled("".join("0: " + line + "\n" for line in out.splitlines()),
                          "".join("0: " + line + "\n" for line in err.splitlines()))


def test_the_node_keeps_the_deadline_itself():
    # No signal from srun at all (its forwarding raced in CI): the node's own deadline stops the
    # command, even one that goes on after its sleep dies, and says so.
    out, err = _wrapper(["/bin/sh", "-c", "sleep 5; echo done"], terminate_after=None, deadline=0.5)
    tasks = _tasks(out, err)
    assert tasks[0].timed_out and tasks[0].rc is None and "done" not in tasks[0].stdout()
    out, err = _wrapper(["/bin/sh", "-c", "trap '' TERM; sleep 1; sleep 1; sleep 1; sleep 5; echo done"],
                        terminate_after=None, deadline=0.5)
    tasks = _tasks(out, err)
    assert tasks[0].timed_out and "done" not in tasks[0].stdout()  # SIGKILL after the grace


def test_a_command_that_exits_124_itself_is_not_a_timeout():
    out, err = _wrapper(["/bin/sh", "-c", "exit 124"], terminate_after=None, deadline=5)
    tasks = _tasks(out, err)
    assert tasks[0].rc == 124 and not tasks[0].timed_out


def test_a_command_that_ends_by_itself_reports_its_status():
    out, err = _wrapper(["/bin/sh", "-c", "echo fine; exit 3"], terminate_after=None)
    tasks = _tasks(out, err)
    assert tasks[0].rc == 3 and tasks[0].stdout() == "fine\n"
