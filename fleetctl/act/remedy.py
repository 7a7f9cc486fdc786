"""The remediation ladder's node-side steps: a GPU reset on the node, and the re-audit that decides
whether the node goes back into service.

A GPU reset runs on the node through the site's transport, as argv (never a shell):
`act.gpu_busy_command` first (default `nvidia-smi --query-compute-apps=pid --format=csv,noheader
-i {gpu}`): any line it prints is a process on the GPU, and the reset is refused; then
`act.gpu_reset_command` (default `nvidia-smi --gpu-reset -i {gpu}`). `{gpu}` is the GPU's index or
PCI bus id from the finding, `{node}` the node; both are checked before they reach an argv. The lab
points both commands at its simulated GPUs (`fleetctl.lab.gpureset`); production code does not know.

The re-audit is a quick audit of the node counting only what the node's logs say after the step
(`since`): the Xid that led to the reset stays in the kernel log, and is the past.

A command that ran and failed is the node's answer (RemediationError: the ladder climbs on); one
that could not be run or did not end, or a re-audit that could not check the node, is fleetctl's
own trouble (TransportError: the ladder stops, the node stays drained, nothing is escalated).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from fleetctl.errors import RemediationError, TransportError
from fleetctl.fanout.result import FAILED

_GPU = re.compile(r"(?:gpu)?(\d{1,3})|([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)")
MAX_OUTPUT = 2000  # characters of a command's output kept in the action log


def gpu_argument(subject: str) -> str:
    """The `{gpu}` of a finding's subject (`gpu3` -> `3`, a PCI bus id as is); RemediationError for
    anything else (several GPUs, a NIC, text)."""
    m = _GPU.fullmatch(subject or "")
    if not m:
        raise RemediationError(f"the finding names no single GPU ({(subject or 'no subject')[:64]!r})")
    if m.group(1):
        return m.group(1)
    return m.group(2) if "." in m.group(2) else m.group(2) + ".0"  # nvidia-smi -i wants the function


def fill(argv: tuple[str, ...] | list[str], node: str, gpu: str) -> list[str]:
    return [a.replace("{node}", node).replace("{gpu}", gpu) for a in argv]


@dataclass
class Remediator:
    """What the engine needs of the nodes: `transport()` opens the site's transport (a context
    manager with `run(nodes, argv, timeout=)`), `audit(node, since)` returns a fleetctl.audit/1 report."""

    transport: object
    audit: object
    busy_command: tuple[str, ...]
    reset_command: tuple[str, ...]
    timeout_s: float = 60.0

    def reset_gpu(self, node: str, subject: str) -> dict:
        gpu = gpu_argument(subject)
        with self.transport() as t:
            busy = self._run(t, node, fill(self.busy_command, node, gpu), "the GPU process check")
            pids = [line.strip() for line in busy.splitlines() if line.strip()]
            if pids:
                raise RemediationError(f"GPU {gpu} of {node} runs {len(pids)} process(es) "
                                       f"({', '.join(pids[:5])[:200]}): not reset")
            started = time.time()
            out = self._run(t, node, fill(self.reset_command, node, gpu), "the GPU reset")
        return {"node": node, "gpu": gpu, "reset_at": round(started, 3), "output": out[:MAX_OUTPUT]}

    def _run(self, t, node: str, argv: list[str], what: str) -> str:
        """The command's output. RemediationError when it ran and failed (the node's answer);
        TransportError when it could not be run or did not end (fleetctl's trouble, never the node's)."""
        [res] = t.run([node], argv, timeout=self.timeout_s)
        if res.ok:
            return res.stdout
        detail = (res.error or res.stderr.strip() or res.stdout.strip() or res.status)[:300]
        if res.status == FAILED:
            raise RemediationError(f"{what} on {node} ({argv[0]}) did not succeed: {detail}")
        raise TransportError(f"{what} on {node} could not be run ({res.status}): {detail}")

    def reaudit(self, node: str, since: float) -> dict:
        """{"status": the node's audit status, "failing": [codes failing or warning]}."""
        report = self.audit(node, since)
        entry = next((n for n in report.get("nodes", []) if n.get("node") == node), None)
        if entry is None or entry.get("transport", "ok") != "ok" or entry.get("error"):
            raise TransportError(f"the re-audit could not check {node}"
                                   + (f": {str(entry.get('error'))[:200]}" if entry and entry.get("error") else ""))
        failing = [r.get("code") for r in entry.get("results", []) if r.get("status") in ("fail", "warn", "error")]
        return {"status": entry.get("status"), "failing": failing}
