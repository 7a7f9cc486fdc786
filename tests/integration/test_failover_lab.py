"""libnccl-net-fleet.so between two lab hosts over both their NICs, with the lab's own faults.

The first host (on leaf1) sends to the last host (on the last leaf), so each path crosses
leaf -> spine -> leaf. The C harness runs inside each host's network namespace (nsenter) and drives
the plugin like NCCL's proxy; the receiver checks every byte of every message."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetctl.lab import faults

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "nccl_plugin" / "tests"))
import fleetnet  # noqa: E402

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def built():
    fleetnet.build()


class Pair:
    def __init__(self, lab, tmp: Path):
        self.lab, self.tmp = lab, tmp
        self.src, self.dst = lab.nodes[0], lab.nodes[-1]
        nics = lab.state["addresses"]["nics"]
        self.addrs = {node: [nics[f"{node}:eth{k}"] for k in range(2)] for node in (self.src, self.dst)}

    def env(self, node: str, **extra) -> dict:
        return {**self.lab.command_env(), "FLEET_NET_IFACES": ",".join(self.addrs[node]),
                "FLEET_NET_HOLDDOWN_MS": "500", "FLEET_NET_COUNTERS_DIR": str(self.tmp / f"counters-{node}"),
                "FLEET_NET_LOG": str(self.tmp / f"events-{node}.jsonl"), **extra}

    def start(self, seconds: float, **extra):
        handle, self.progress = self.tmp / "handle", self.tmp / "progress"
        base = [str(fleetnet.HARNESS), "--lib", str(fleetnet.LIB), "--version", "12", "--seconds", str(seconds),
                "--max-size", str(1 << 20), "--handle-file", str(handle)]
        run = lambda node, args: subprocess.Popen(  # noqa: E731
            ["nsenter", f"--net=/run/netns/{self.lab.netns(node)}", *base, *args], env=self.env(node, **extra),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.recv = run(self.dst, ["--role", "recv"])
        self.send = run(self.src, ["--role", "send", "--progress", str(self.progress)])
        deadline = time.monotonic() + 30
        while fleetnet.progress_bytes(self.progress) < 2_000_000:
            assert time.monotonic() < deadline, "the transfer did not start"
            assert self.send.poll() is None, self.send.communicate()[1][-2000:]
            time.sleep(0.02)

    def finish(self, timeout: float = 90):
        return fleetnet.finish([self.recv, self.send], timeout=timeout)

    def events(self, node: str) -> list[dict]:
        path = self.tmp / f"events-{node}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def intact(result_recv: dict, result_send: dict) -> None:
    assert (result_recv["corrupt"], result_recv["duplicated"], result_recv["lost"]) == (0, 0, 0)
    assert result_recv["messages"] == result_send["messages"] > 0
    assert result_recv["bytes"] == result_send["bytes"]


def test_nic_down_mid_transfer_resumes_every_byte_checked(lab, built, tmp_path):
    pair = Pair(lab, tmp_path)
    pair.start(seconds=6)
    try:
        faults.add(f"{pair.src}:eth1", "down")
        time.sleep(2.0)
        progress_during = fleetnet.progress_bytes(pair.progress)
        time.sleep(1.0)
        assert fleetnet.progress_bytes(pair.progress) > progress_during, "no progress on the surviving NIC"
    finally:
        faults.clear(f"{pair.src}:eth1")
    (rc_r, res_r, err_r), (rc_s, res_s, err_s) = pair.finish()
    assert (rc_s, rc_r) == (0, 0), err_s[-2000:] + err_r[-2000:]
    intact(res_r[0], res_s[0])
    downs = [e for e in pair.events(pair.src) if e["event"] == "path_down"]
    assert downs and all(e["path"] == 1 for e in downs)
    assert any(e["event"] == "failback" for e in pair.events(pair.src))


def test_link_flapping_every_second_resumes_and_fails_back(lab, built, tmp_path):
    pair = Pair(lab, tmp_path)
    pair.start(seconds=12)
    try:
        faults.add(f"{pair.src}:eth0", "flap", "2s")   # down one second, up one second
        time.sleep(5.0)
    finally:
        faults.clear(f"{pair.src}:eth0")
    (rc_r, res_r, err_r), (rc_s, res_s, err_s) = pair.finish()
    assert (rc_s, rc_r) == (0, 0), err_s[-2000:] + err_r[-2000:]
    intact(res_r[0], res_s[0])
    events = pair.events(pair.src)
    downs = [e for e in events if e["event"] == "path_down" and e["path"] == 0]
    backs = [e for e in events if e["event"] == "failback" and e["path"] == 0]
    assert downs and backs and backs[-1]["mono_ns"] > downs[-1]["mono_ns"], "path 0 did not fail back"


def test_both_nics_dying_one_after_the_other_is_a_clean_error(lab, built, tmp_path):
    pair = Pair(lab, tmp_path)
    pair.start(seconds=60)
    started = time.monotonic()
    try:
        faults.add(f"{pair.src}:eth0", "down")
        time.sleep(1.0)
        faults.add(f"{pair.src}:eth1", "down")
        (rc_r, res_r, _), (rc_s, res_s, _) = pair.finish(timeout=40)
    finally:
        faults.clear(f"{pair.src}:eth0")
        faults.clear(f"{pair.src}:eth1")
    assert time.monotonic() - started < 30, "a connection with no path left must fail, not hang"
    assert rc_s == 3 and res_s[0]["error"] is True
    assert rc_r == 3 and res_r[0]["error"] is True
    assert res_r[0]["corrupt"] == 0 and res_r[0]["duplicated"] == 0
    assert any(e["event"] == "conn_failed" for e in pair.events(pair.src))
