"""Node checks for `fleetctl audit`: the agentless payload, its arguments, fleet consistency.

API for the CLI, the fan-out layer and the Slurm hooks:
  build_payload() -> str              the script to pipe to `python3 - '<args json>'` on a node
  payload_args(site, node, level, since, ...) -> dict
  run_payload_locally(args) -> dict   the same checks in this process (`fleetctl audit --local`)
  run_payload_subprocess(args) -> dict, parse_payload_output(stdout, rc, stderr) -> dict
  fleet_consistency(docs, site) -> list of findings
  suspects(docs), next_level(level)   for --escalate;  changes(before, after) for the Epilog
  hardware_failures(doc)              the fails a Prolog may refuse a job for
The result document is described in docs/checks.md. The names are imported when first used (PEP
562): a Prolog that needs the follow-up rules does not import the fleet comparison.
"""

from fleetctl.lazy import lazy_exports

_EXPORTS = {"build_payload": "builder", "parse_payload_output": "builder", "payload_args": "builder",
            "run_payload_locally": "builder", "run_payload_subprocess": "builder", "since_epoch": "builder",
            "fleet_consistency": "fleet", "changes": "followup", "compare": "followup",
            "hardware_failures": "followup", "next_level": "followup", "suspects": "followup"}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
