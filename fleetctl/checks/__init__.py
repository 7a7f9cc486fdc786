"""Node checks for `fleetctl audit`: the agentless payload, its arguments, fleet consistency.

API for the CLI, the fan-out layer and the Slurm hooks:
  build_payload() -> str              the script to pipe to `python3 - '<args json>'` on a node
  payload_args(site, node, level, since, ...) -> dict
  run_payload_locally(args) -> dict   the same checks in this process (`fleetctl audit --local`)
  run_payload_subprocess(args) -> dict, parse_payload_output(stdout, rc, stderr) -> dict
  fleet_consistency(docs, site) -> list of findings
  suspects(docs), next_level(level)   for --escalate;  changes(before, after) for the Epilog
  hardware_failures(doc)              the fails a Prolog may refuse a job for
The result document is described in docs/checks.md.
"""

from fleetctl.checks.builder import (build_payload, parse_payload_output, payload_args,
                                     run_payload_locally, run_payload_subprocess, since_epoch)
from fleetctl.checks.fleet import fleet_consistency
from fleetctl.checks.followup import changes, compare, hardware_failures, next_level, suspects

__all__ = ["build_payload", "parse_payload_output", "payload_args", "run_payload_locally",
           "run_payload_subprocess", "since_epoch", "fleet_consistency", "suspects", "next_level", "changes", "compare",
           "hardware_failures"]
