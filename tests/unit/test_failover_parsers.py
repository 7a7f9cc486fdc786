"""Parsers of fleetctl.failover, fed hostile or damaged input: the plugin's counters files, rtnetlink
messages, IB port state files, the harness's result lines, trace and event log; the drill's guard
on a real cluster."""

from __future__ import annotations

import json
import os
import struct

import pytest

from fleetctl.failover import FailoverError, counters, harness, netlink, sysfs
from fleetctl.failover.realcluster import check_guard
from fleetctl.slurm.base import Reservation

GOOD = {"pid": 4242, "updated": 1796100000.5, **{name: 1 for name in counters.FIELDS}}


def test_counters_parse_accepts_the_plugins_format_only():
    updated, values = counters.parse(json.dumps(GOOD), 4242)
    assert updated == 1796100000.5 and values["path_down"] == 1 and set(values) == set(counters.FIELDS)
    for bad, why in ((dict(GOOD, pid=1), "does not match"), (dict(GOOD, errors=-1), "errors"),
                     (dict(GOOD, failbacks=True), "failbacks"), (dict(GOOD, paths_up="2"), "paths_up"),
                     (dict(GOOD, bytes_sent=2 ** 64), "bytes_sent"), (dict(GOOD, updated=None), "updated")):
        with pytest.raises(ValueError, match=why):
            counters.parse(json.dumps(bad), 4242)
    with pytest.raises(ValueError):
        counters.parse("[1, 2]", 4242)


def test_counters_scan_reports_damaged_files_and_never_follows_links(tmp_path):
    (tmp_path / f"{os.getpid()}.json").write_text(json.dumps(dict(GOOD, pid=os.getpid())))
    (tmp_path / "999999999.json").write_text(json.dumps(dict(GOOD, pid=999999999)))
    (tmp_path / "12.json").write_text("x" * 10_000)
    (tmp_path / "13.json").write_text("{not json")
    (tmp_path / "14.json").symlink_to(tmp_path / f"{os.getpid()}.json")
    (tmp_path / "15.json.tmp").write_text("ignored")
    (tmp_path / "16.json").mkdir()
    scan = counters.scan(tmp_path)
    alive = {c.pid: c.alive for c in scan.files}
    assert alive == {os.getpid(): True}
    assert scan.refused == {str(tmp_path / "999999999.json"): "no process 999999999 here: its owner cannot be checked"}
    assert set(scan.damaged) == {str(tmp_path / f"{n}.json") for n in (12, 13, 14, 16)}
    assert counters.scan(tmp_path / "missing").files == []


@pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root to make")
def test_counters_count_only_when_the_process_owner_wrote_them(tmp_path):
    """Issue 20, defect 21: any user could publish counters for any pid. A file counts only when
    the pid exists and the file's owner owns /proc/<pid>; a per-user directory only when it is
    that uid's. The watch says why it ignores the others."""
    from fleetctl.failover.watch import Watch

    me = os.getpid()  # a process of root's
    mine = tmp_path / f"{me}.json"
    mine.write_text(json.dumps(dict(GOOD, pid=me)))
    forged = tmp_path / "1.json"  # init's counters, written by nobody
    forged.write_text(json.dumps(dict(GOOD, pid=1)))
    os.chown(forged, 65534, 65534)
    nobody = tmp_path / "65534"
    nobody.mkdir()
    os.chown(nobody, 65534, 65534)
    (nobody / f"{me}.json").write_text(json.dumps(dict(GOOD, pid=me)))
    os.chown(nobody / f"{me}.json", 65534, 65534)
    squatted = tmp_path / "1000"  # uid 1000's directory, made by nobody
    squatted.mkdir()
    os.chown(squatted, 65534, 65534)
    (squatted / f"{me}.json").write_text(json.dumps(dict(GOOD, pid=me)))
    scan = counters.scan(tmp_path)
    assert [c.path for c in scan.files] == [str(mine)]
    assert scan.refused == {
        str(forged): "written by uid 65534, but process 1 runs as uid 0",
        str(nobody / f"{me}.json"): f"written by uid 65534, but process {me} runs as uid 0",
        str(squatted): "the directory of uid 1000 belongs to uid 65534",
    }
    w = Watch(counters_dir=str(tmp_path), sysfs_root=str(tmp_path / "nosys"), use_netlink=False)
    records = w.start()
    assert [r["pid"] for r in records if r["event"] == "counters"] == [me]
    assert {r["path"]: r["why"] for r in records if r["event"] == "counters_refused"} == scan.refused
    assert w.snapshot()["refused"] == scan.refused
    assert not [r for r in w.poll(0) if r["event"] == "counters_refused"], "reported once while it stays refused"


def _link_msg(index, name, flags, oper=None, changes=None, kind=netlink.RTM_NEWLINK):
    attrs = b""
    for t, payload in ((netlink.IFLA_IFNAME, name.encode() + b"\0"),
                       (netlink.IFLA_OPERSTATE, bytes([oper]) if oper is not None else None),
                       (netlink.IFLA_CARRIER_CHANGES, struct.pack("=I", changes) if changes is not None else None)):
        if payload is None:
            continue
        length = 4 + len(payload)
        attrs += struct.pack("=HH", length, t) + payload + b"\0" * ((4 - length % 4) % 4)
    body = struct.pack("=BxHiII", 0, 1, index, flags, 0) + attrs
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body


def test_netlink_link_messages():
    up = netlink.IFF_UP | netlink.IFF_RUNNING
    data = (_link_msg(2, "eth0", up, 6, 3) + _link_msg(3, "eth1", netlink.IFF_UP, 2, 4)
            + _link_msg(4, "eth2", 0, kind=netlink.RTM_DELLINK) + struct.pack("=IHHII", 16, netlink.NLMSG_DONE, 0, 0, 0))
    links, done = netlink.parse_link_messages(data)
    assert done
    assert [(l.name, l.up, l.admin_up, l.operstate, l.carrier_changes, l.deleted) for l in links] == [
        ("eth0", True, True, "up", 3, False), ("eth1", False, True, "down", 4, False),
        ("eth2", False, False, "unknown", None, True)]


def test_netlink_truncated_or_lying_lengths_are_skipped():
    msg = _link_msg(2, "eth0", 0x41, 6, 1)
    for cut in range(0, len(msg)):
        netlink.parse_link_messages(msg[:cut])  # never raises
    lying = bytearray(msg)
    struct.pack_into("=I", lying, 0, 10_000)
    assert netlink.parse_link_messages(bytes(lying)) == ([], False)
    bad_attr = bytearray(msg)
    struct.pack_into("=H", bad_attr, 32, 2)  # an attribute shorter than its header
    links, _ = netlink.parse_link_messages(bytes(bad_attr))
    assert links == []  # no name: skipped


def test_ib_port_states_from_a_fake_sysfs(tmp_path):
    for dev, port, state, phys in (("mlx5_0", "1", "4: ACTIVE", "5: LinkUp"), ("mlx5_1", "1", "1: DOWN", "3: Disabled"),
                                   ("mlx5_2", "1", "garbage", "x"), ("mlx5_3", "evil", "4: ACTIVE", "")):
        d = tmp_path / "class" / "infiniband" / dev / "ports" / port
        d.mkdir(parents=True)
        (d / "state").write_text(state + "\n")
        (d / "phys_state").write_text(phys + "\n")
    ports = sysfs.ib_ports(tmp_path)
    assert [(p.name, p.up, p.state, p.phys_state) for p in ports] == [
        ("mlx5_0/1", True, "ACTIVE", "LinkUp"), ("mlx5_1/1", False, "DOWN", "Disabled")]
    assert sysfs.ib_ports(tmp_path / "none") == []
    assert sysfs.parse_port_state("4: ACTIVE") == "ACTIVE" and sysfs.parse_port_state(None) == ""


def test_harness_outputs(tmp_path):
    stdout = 'harness: hello\n{"role": "recv", "bytes": 5}\n{broken\n[1]\n{"role": "send"}\n'
    assert harness.results(stdout) == [{"role": "recv", "bytes": 5}, {"role": "send"}]
    trace = tmp_path / "trace"
    trace.write_text("0 100 1 1000\n1 100 2 2000\nbad line\n2 100 3 9000\n3 -5 4 9500\n")
    rows = harness.read_trace(trace)
    assert rows == [(0, 100, 1, 1000), (1, 100, 2, 2000), (2, 100, 3, 9000)]
    # the longest stall between the fault (at 1500 ns) and the link's return (at 9500 ns)
    assert harness.resume_ms(rows, 1500, 9500) == pytest.approx(7000 / 1e6)
    assert harness.resume_ms(rows, 9100, 9500) == pytest.approx(400 / 1e6)  # nothing completed: all of it
    assert harness.gbps(rows, 0, 10 ** 9) == pytest.approx(300 * 8 / 1e9, abs=1e-3)
    assert harness.gbps(rows, 5, 5) is None
    events = tmp_path / "events"
    events.write_text('{"event": "path_down", "path": 1, "mono_ns": 7}\nnot json\n{"event": 3}\n[]\n')
    assert harness.read_events(events) == [{"event": "path_down", "path": 1, "mono_ns": 7}]
    assert harness.pct([3, 1, 2], 50) == 2 and harness.pct([], 50) is None
    (tmp_path / "progress").write_text("12345 7 999\n")
    assert harness.progress_bytes(tmp_path / "progress") == 12345
    assert harness.progress_bytes(tmp_path / "missing") == 0


class FakeSlurm:
    def __init__(self, reservations):
        self._res = reservations

    def reservations(self, name=None):
        return self._res


def test_drill_guard_on_a_real_cluster():
    maint = Reservation("maint", ["gpu1", "gpu2", "gpu3"], flags=["MAINT", "IGNORE_JOBS"], state="ACTIVE")
    with pytest.raises(FailoverError, match="without --i-know"):
        check_guard(FakeSlurm([maint]), "gpu1", "gpu2", False)
    assert check_guard(FakeSlurm([maint]), "gpu1", "gpu2", True).name == "maint"
    others = [Reservation("spares", ["gpu1", "gpu2"], flags=["IGNORE_JOBS"], state="ACTIVE"),
              Reservation("later", ["gpu1", "gpu2"], flags=["MAINT"], state="INACTIVE"),
              Reservation("half", ["gpu1"], flags=["MAINT"], state="ACTIVE")]
    with pytest.raises(FailoverError, match="no active maintenance reservation"):
        check_guard(FakeSlurm(others), "gpu1", "gpu2", True)


def test_harness_lines_nested_past_the_stack_are_skipped(tmp_path):
    deep = '{"a":' + "[" * 4000 + "\n"  # within MAX_LINE, deeper than the interpreter's stack
    assert harness.results(deep + '{"role": "recv"}\n') == [{"role": "recv"}]
    events = tmp_path / "events"
    events.write_text(deep + '{"event": "path_up"}\n')
    assert harness.read_events(events) == [{"event": "path_up"}]


class RouteRunner:
    """A node whose `ip -j route` prints `answer`; records the commands run."""

    def __init__(self, answer):
        self.answer, self.argvs = answer, []

    def run(self, node, argv, timeout=60):
        self.argvs.append(argv)
        return self.answer if argv[:3] == ["ip", "-j", "route"] else ""


@pytest.mark.parametrize("answer", ['{"dst": "default"}', "7", "[" * 5000, '[{"dst": "10.0.0.0/8", "flags": 3}]'])
def test_drill_route_save_survives_what_a_node_prints(answer):
    from fleetctl.failover.realcluster import IpLinkFaults

    runner = RouteRunner(answer)
    faults = IpLinkFaults(runner)
    faults._save_routes("a", "eth0")
    faults._restore_routes("a", "eth0")
    replaced = [a for a in runner.argvs if a[:3] == ["ip", "route", "replace"]]
    assert replaced in ([], [["ip", "route", "replace", "10.0.0.0/8", "dev", "eth0"]])


def test_the_harness_is_looked_for_where_it_says(tmp_path, monkeypatch):
    monkeypatch.delenv(harness.HARNESS_ENV, raising=False)
    monkeypatch.delenv(harness.LIB_ENV, raising=False)
    with pytest.raises(FailoverError) as caught:
        harness.locate(tmp_path / "build")
    assert str(tmp_path / "build" / "fleet_harness") in caught.value.message
    assert str(tmp_path / "build" / "libnccl-net-fleet.so") in caught.value.message
    assert f"make -C {tmp_path}" in caught.value.hint and harness.HARNESS_ENV in caught.value.hint
    program, lib = tmp_path / "h", tmp_path / "lib.so"
    program.write_text("")
    program.chmod(0o755)
    lib.write_text("")
    monkeypatch.setenv(harness.HARNESS_ENV, str(program))
    monkeypatch.setenv(harness.LIB_ENV, str(lib))
    assert harness.locate(tmp_path / "build") == harness.HarnessFiles(program, lib)
    program.chmod(0o644)  # not executable: not a harness
    with pytest.raises(FailoverError, match=f"no {program}$"):
        harness.locate(tmp_path / "build")
