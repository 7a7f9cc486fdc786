"""`python -m fleetctl.lab.install SUITE...` (scripts/install): the Debian roots of the lab's newer
Slurm (fleetctl.lab.slurmroot) and spank_fleetctl.so built against each root's Slurm
(fleetctl.lab.spankbuild). Apart from both, so that neither imports the other back.
"""

from __future__ import annotations

import sys

from fleetctl.errors import LabError
from fleetctl.lab import slurmroot, spankbuild


def main(argv: list[str]) -> int:
    """Build the roots that are absent, add what a cached root lacks, and build spank_fleetctl.so for
    each root's Slurm."""
    for choice in argv or ["trixie"]:
        suite = slurmroot.suite_of(choice)
        if suite is None:
            continue
        try:
            root, took = slurmroot.ensure_root(suite, lambda m: print(f"install: {m}", flush=True))
        except LabError as exc:
            print(f"install: Debian {suite} root for the lab: {exc.message}", file=sys.stderr)
            return 1
        state = f"built in {took:.0f} s" if took is not None else "cached"
        version = (root / slurmroot.STAMP).read_text().split("slurm=")[-1].strip()
        print(f"install: Debian {suite} root (Slurm {version}) {state}: {root}")
        # spank_fleetctl.so for that Slurm (the lab's plugstack loads it); a failure costs only the
        # SPANK tests on that Slurm, which say why.
        try:
            print(f"install: spank_fleetctl.so for Slurm {version}: {spankbuild.build(root)}")
        except LabError as exc:
            print(f"install: warning: spank_fleetctl.so for Slurm {version}: {exc.message}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
