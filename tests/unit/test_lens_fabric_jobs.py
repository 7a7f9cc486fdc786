"""The merge's jobs (lens/jobs.py FabricJobs): which running jobs an element of the shared fabric
touches, from the topology alone: jobs with nodes on both sides of it."""

from __future__ import annotations

from fleetctl.lens.jobs import FabricJobs
from fleetctl.slurm.base import SlurmJob
from tests.support.fabrics import fat_tree, leaf_spine


def _job(job_id: str, *nodes: str, state: str = "RUNNING") -> SlurmJob:
    return SlurmJob(job_id, state, user="alice", partition="gpu", nodes=list(nodes),
                    nodelist=",".join(nodes))


def _ids(jobs) -> list[str]:
    return [j["job_id"] for j in jobs]


def test_a_spine_touches_jobs_across_leaves_and_an_uplink_those_leaving_its_leaf():
    topo = leaf_spine(4, 2, 2)  # leaf1: node1-2, leaf2: node3-4, ...
    fj = FabricJobs(topo)
    fj.set_jobs([_job("1", "node1", "node2"),  # one leaf: no spine, no uplink
                 _job("2", "node1", "node3"),  # leaf1 and leaf2
                 _job("3", "node5", "node7"),  # leaf3 and leaf4
                 _job("4", "node2", "node8", state="PENDING")])
    assert _ids(fj.affected({"type": "switch", "id": "spine1"})) == ["2", "3"]
    assert _ids(fj.affected({"type": "link", "id": "leaf1--spine2", "direction": "both"})) == ["2"]
    assert _ids(fj.affected({"type": "link", "id": "leaf4--spine1"})) == ["3"]
    assert _ids(fj.affected({"type": "switch", "id": "leaf1"})) == ["1", "2"]  # hosts on it
    assert _ids(fj.affected({"type": "nic", "id": "node3:eth1"})) == ["2"]
    assert _ids(fj.affected({"type": "link", "id": "node1:eth0--leaf1"})) == ["1", "2"]
    assert fj.affected({"type": "switch", "id": "no-such-switch"}) == []
    [rec] = fj.affected({"type": "link", "id": "leaf1--spine1"})
    assert rec == {"job_id": "2", "user": "alice", "nodes": "node1,node3", "partition": "gpu"}


def test_a_core_touches_only_jobs_across_pods():
    topo = fat_tree(4)  # 4 pods of 4 hosts, 2 leaves and 2 aggregations each
    below = topo.hosts_below()
    core = next(s for s, t in topo.switch_tier.items() if t == 3)
    pods = sorted({frozenset(below[s]) for s, t in topo.switch_tier.items() if t == 2}, key=sorted)
    a, b = sorted(pods[0]), sorted(pods[1])
    assert len(pods) == 4 and all(len(p) == 4 for p in pods) and below[core] == frozenset(topo.hosts)
    fj = FabricJobs(topo)
    fj.set_jobs([_job("in-pod", a[0], a[3]), _job("two-pods", a[0], b[0])])
    assert _ids(fj.affected({"type": "switch", "id": core})) == ["two-pods"]


def test_job_refresh_asks_slurm_every_interval_and_says_a_failure_once():
    """lens/jobs.JobRefresh, the coordinator's and the merge's: Slurm asked at most once per
    interval (unless forced); while it fails the caller goes on, told once per failing streak."""
    from fleetctl.lens.jobs import JobRefresh

    class Slurm:
        def __init__(self):
            self.calls, self.fail = 0, True

        def jobs(self, states):
            self.calls += 1
            if self.fail:
                raise RuntimeError("squeue: error: Unable to contact slurm controller")
            return ["job"]

    class Jobs:
        got = None

        def set_jobs(self, jobs):
            self.got = jobs

    slurm, jobs, said = Slurm(), Jobs(), []
    refresh = JobRefresh(slurm, 3600.0, said.append, "merge: ")
    refresh(jobs)
    refresh(jobs)  # within the interval: not asked
    refresh(jobs, force=True)
    assert slurm.calls == 2 and jobs.got is None
    assert said == ["merge: cannot list running jobs: squeue: error: Unable to contact slurm controller"]
    slurm.fail = False
    refresh(jobs, force=True)
    assert jobs.got == ["job"] and len(said) == 1
    JobRefresh(None, 0.0, said.append)(jobs, force=True)  # no Slurm here: nothing asked
    assert slurm.calls == 3
