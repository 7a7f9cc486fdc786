"""fleetctl act: from a detection to an action, by policy, with a budget, an action log and undo.

    detections  audit findings, lens events and hook drains as one `Detection` shape
    policies    the site file's [[act.policies]]: which detections lead to which actions
    engine      decide (match, refuse or take) and do, logging pending -> done around every action
    actionlog   the JSON-lines action log (flock-appended), its current view, crash recovery
    budget      never drain more than X % of a partition or N nodes per hour; the circuit breaker
    ladder      the remediation ladder: breaker, suspects, GPU reset + re-audit, reboot, service request
    remedy      the ladder's node-side steps (through the site's transport) and the re-audit
    incidents   the incident memory: per-node history, mean time between incidents, suspects
    tickets     service requests: a ticket file with the evidence bundle (and a webhook)
    undo        `act undo ACTION_ID`
    explain     a plain-language account of a finding, an event, a node or a job (no language model)

No click or rich here (docs/act.md).
"""
