"""Record the Slurm outputs the parser tests use, from the lab's real Slurm (run as root):

    python tests/unit/slurm_outputs/capture.py [system|trixie|sid]

(the lab's Slurm: this machine's, or a Debian root's, see docs/slurm-versions.md)

Brings up a lab (taking the session lock), makes a fleetctl drain, an operator drain, a running job,
a pending job and a reservation, records `scontrol show node|reservation --oneliner` and squeue in
the parsers' format into slurm_outputs/<major.minor>/, then tears the lab down.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fleetctl.lab.session import LabSession
from fleetctl.lab.topology import LabParams
from fleetctl.slurm import backend_for_site
from fleetctl.slurm.parse import SQUEUE_FORMAT


def main() -> None:
    choice = sys.argv[1] if len(sys.argv) > 1 else "system"
    with LabSession(LabParams(hosts=4, nics_per_host=2, leaves=2, spines=2, slurm_from=choice)) as lab:
        env = lab.command_env()
        os.environ["PATH"] = env["PATH"]  # a Debian root's client commands, for the backend too
        sh = lambda *a: subprocess.run(list(a), env=env, capture_output=True, text=True,  # noqa: E731
                                       timeout=60, check=True).stdout
        slurm = backend_for_site(lab.cluster)
        version = slurm.ping()
        out = Path(__file__).parent / ".".join(version.split(".")[:2])
        out.mkdir(exist_ok=True)
        n1, n2, n3, n4 = lab.nodes[:4]
        slurm.drain([n1], "xid79", "gpu3 fell off the bus")
        sh("scontrol", "update", f"NodeName={n2}", "State=DRAIN", "Reason=psu swap, see [ticket 4711] x=y")
        batch = ("sbatch", "--parsable", "--output=/dev/null")
        jobs = [sh(*batch, "-N2", "-J", "llama|pretrain", "--wrap", "sleep 300").strip(),
                sh(*batch, "-N4", "-J", "eval", "--wrap", "sleep 300").strip()]
        time.sleep(3)
        slurm.create_reservation("fleetctl-spares", [n4], flags=["maint", "ignore_jobs"])
        (out / "show_node.txt").write_text(sh("scontrol", "show", "node", "--oneliner"))
        (out / "squeue.txt").write_text(sh("squeue", "-h", "-o", SQUEUE_FORMAT))
        (out / "show_reservation.txt").write_text(sh("scontrol", "show", "reservation", "--oneliner"))
        slurm.delete_reservation("fleetctl-spares")
        (out / "no_reservation.txt").write_text(sh("scontrol", "show", "reservation", "--oneliner"))
        sh("scancel", *jobs)
        print(f"recorded Slurm {version} outputs in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
