"""lens in shards on the 16-host lab (4 leaves, 2 spines): `lens shards` cuts it into two shards of
two leaves, each runs its own coordinator (`lens run NODESET`), and `lens merge` joins their
windows. Clean: every shard in, nothing found. A loss on every link of spine1: each shard sees
only its own leaves' links of it; the merge names the switch once, listing both shards, as a
one-shot and as the merge service's one event.

Marker `mesh16`: scripts/test runs these on the 16-host lab (FLEETCTL_TEST_LAB_HOSTS=16
FLEETCTL_TEST_LAB_LEAVES=4); the default 4-host session deselects them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labutil import sbatch, wait_for

from fleetctl.lab import faults

pytestmark = [pytest.mark.lab, pytest.mark.mesh16]
FOUND_WITHIN_S = 60.0  # a loaded 2-core CI machine: the shards opened events 27 s after the fault once


class Shards:
    def __init__(self, lab, tmp: Path):
        self.lab, self.tmp = lab, tmp
        self.site = tmp / "site.toml"
        text = lab.site_file.read_text()
        assert "\n[lens]\n" in text
        self.site.write_text(text.replace("\n[lens]\n", "\n[lens]\nshard_max_hosts = 8\n"))
        self.dirs: list[Path] = []

    def run(self, *args, timeout=120) -> subprocess.CompletedProcess:
        env = self.lab.command_env()
        env["FLEETCTL_SITE"] = str(self.site)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]),
                                                        env.get("PYTHONPATH", "")) if p)
        return subprocess.run([sys.executable, "-m", "fleetctl", *args], env=env,
                              capture_output=True, text=True, timeout=timeout)

    def json(self, *args) -> tuple[int, dict]:
        r = self.run("--format", "json", *args)
        assert r.returncode in (0, 1, 2), f"{args}: {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r.returncode, json.loads(r.stdout)

    def merge_once(self) -> tuple[int, dict]:
        return self.json("lens", "merge", "--once", "--root", str(self.root))

    def status(self) -> str:
        """Each shard's last window and counters (why a shard went stale)."""
        out = []
        for d in self.dirs:
            r = self.run("--format", "json", "lens", "status", "--state-dir", str(d))
            try:
                doc = json.loads(r.stdout)
                text = json.dumps({k: doc.get(k) for k in ("last_window", "counters")})
            except ValueError:
                text = r.stdout[-1000:] + r.stderr[-1000:]
            out.append(f"--- {d} ---\n{text[:3000]}")
        return "\n".join(out) + "\n" + self.logs()

    def logs(self) -> str:
        return "\n".join(f"--- {d} ---\n" + (d / "lens.log").read_text()[-2000:]
                         for d in self.dirs if (d / "lens.log").exists())


@pytest.fixture(scope="module")
def shards(lab, tmp_path_factory):
    assert len(lab.nodes) >= 16, "needs FLEETCTL_TEST_LAB_HOSTS=16 FLEETCTL_TEST_LAB_LEAVES=4"
    S = Shards(lab, tmp_path_factory.mktemp("shards"))
    _, layout = S.json("lens", "shards")
    S.layout = layout
    S.root = Path(lab.cluster.data["lens"]["state_dir"])  # `lens run --shard` states go below
    try:
        for i, shard in enumerate(layout["shards"]):
            d = S.root / shard["name"]
            shutil.rmtree(d, ignore_errors=True)  # an earlier run's document is stale
            S.dirs.append(d)
            # one by its name in the layout (as the shard unit runs it), one by its nodes
            args = ("--shard", shard["name"]) if i == 0 else (shard["nodes"], "--state-dir", str(d))
            # 20 probes/s per pair: at 50 the 16 agents overloaded the 2-core machine (every host of
            # a shard set aside in most windows, so shards went stale and a merge took 5-25 s)
            r = S.run("lens", "run", *args, "--rate", "20")
            assert r.returncode == 0, r.stderr
        wait_for(lambda: all((d / "shard-window.json").exists() for d in S.dirs), 90, 0.5)
        # measured windows from both shards (a loaded machine takes a while to the first)
        wait_for(lambda: {s["switch"] for s in S.merge_once()[1]["switches"]} == {"spine1", "spine2"}, 120, 1.0)
        yield S
    finally:
        for d in S.dirs:
            S.run("lens", "stop", "--state-dir", str(d))
        if faults.listing():
            faults.clear()


def test_the_lab_is_two_shards_of_two_leaves_sharing_the_spines(shards):
    layout = shards.layout
    assert [(s["name"], s["nodes"], s["pods"]) for s in layout["shards"]] == \
        [("shard-0", "node[1-8]", 2), ("shard-1", "node[9-16]", 2)]
    assert layout["shared_switches"] == ["spine1", "spine2"]
    assert layout["unmeasured_uplinks"] == []


def _running(lab) -> set[str]:
    out = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], env=lab.command_env(),
                         capture_output=True, text=True, timeout=30).stdout
    return set(out.split())


def _all_in(result: tuple[int, dict]) -> tuple[int, dict] | None:
    return None if result[1]["shards_missing"] else result


def test_clean_shards_merge_to_nothing(shards):
    time.sleep(5)
    for _ in range(3):
        # a shard whose window is late on a loaded 2-core machine is left out and said (once
        # both were 6.8 s behind): that is the merge's answer, checked in the unit tests; here,
        # a merge with both shards in
        seen = []

        def merged():
            seen.append(shards.merge_once())
            return _all_in(seen[-1])

        try:
            rc, doc = wait_for(merged, 30, 1.0)
        except AssertionError:
            raise AssertionError("no merge with both shards in within 30 s; the last: "
                                 + json.dumps(seen[-1][1])[:2000] + shards.status()) from None
        assert (rc, doc["findings"], doc["shards_missing"]) == (0, [], []), \
            json.dumps(doc)[:3000] + shards.logs()
        assert doc["shards_used"] == ["shard-0", "shard-1"]
        assert {s["switch"] for s in doc["switches"]} == {"spine1", "spine2"}
        time.sleep(2)


def test_a_lossy_spine_is_one_finding_and_one_merged_event(shards):
    service_dir = shards.tmp / "merge"
    env = shards.lab.command_env()
    env["FLEETCTL_SITE"] = str(shards.site)
    # a job across the two shards (its traffic crosses the spines), one inside leaf1 (it does not)
    across = sbatch(shards.lab, "-N2", "-w", "node1,node16", "--wrap", "sleep 3000")
    inside = sbatch(shards.lab, "-N2", "-w", "node2,node3", "--wrap", "sleep 3000")
    wait_for(lambda: _running(shards.lab) >= {across, inside}, 30, 0.5)
    service = subprocess.Popen(
        [sys.executable, "-m", "fleetctl", "lens", "merge", "--state-dir", str(service_dir),
         *[a for d in shards.dirs for a in ("--from", str(d))]],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        for leaf in range(1, 5):
            faults.add(f"leaf{leaf}->spine1", "loss", 2.0)
            faults.add(f"spine1->leaf{leaf}", "loss", 2.0)

        # a one-shot merge is a snapshot: in a fault's first windows a shard may have seen a
        # link of spine1 or two before enough were in to name the switch (true, if less sharp:
        # the event service holds such links as suspects); nothing off spine1 is ever named
        seen = []

        def named():
            rc, doc = shards.merge_once()
            seen.extend(doc["findings"])
            # both shards' evidence: a shard whose latest window is still from before the fault
            # (or a shard left out) gives a merge that names spine1 from the other alone
            return (rc, doc) if any(x["element"]["id"] == "spine1" and
                                    x["evidence"]["shards"] == ["shard-0", "shard-1"]
                                    for x in doc["findings"]) else None
        try:
            rc, doc = wait_for(named, FOUND_WITHIN_S, 1.0)
        except AssertionError:
            raise AssertionError(f"spine1 not named from both shards in {FOUND_WITHIN_S} s\n"
                                 f"{json.dumps(seen)[:3000]}\n{shards.logs()}") from None
        off = [x for x in seen if x["element"]["id"] != "spine1" and
               not (x["element"]["type"] == "link" and x["element"]["id"].endswith("--spine1"))]
        assert not off, json.dumps(off)[:3000]
        f = doc["findings"]
        assert [(x["element"]["type"], x["element"]["id"], x["metric"]) for x in f] == \
            [("switch", "spine1", "loss")], json.dumps(f)[:3000]
        assert f[0]["evidence"]["shards"] == ["shard-0", "shard-1"]
        assert rc in (1, 2)
        time.sleep(4)
        r = shards.run("--format", "json", "lens", "events", "--state-dir", str(service_dir))
        events = json.loads(r.stdout)["events"]
        assert [(e["element"]["type"], e["element"]["id"]) for e in events] == [("switch", "spine1")], \
            json.dumps(events)[:3000]
        # the merged event names the job whose nodes it sits between (refreshed every 10 s)
        assert [j["job_id"] for j in events[0]["jobs"]] == [across], events[0]["jobs"]
    finally:
        service.send_signal(signal.SIGTERM)
        _, err = service.communicate(timeout=30)
        faults.clear()
        subprocess.run(["scancel", across, inside], env=env, timeout=30, check=False)
    assert service.returncode == 0, err[-2000:]
