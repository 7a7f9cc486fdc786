"""The severity scales and their mappings, all in one place (no dependency: the hooks' fast path and
act's detections import it without numpy).
"""

# A finding (audit --mesh, lens windows) is critical, major, minor or
# warning (probe findings); an event (lens's event log, act's detections) is critical, warning or
# info; a node check's status (ok ... fail) becomes an event's severity by one table too.
SEVERITY_RANK = {"critical": 3, "major": 2, "minor": 1, "warning": 0}
EVENT_SEVERITIES = ("critical", "warning", "info")  # worst first
EVENT_SEVERITY_RANK = {sev: len(EVENT_SEVERITIES) - 1 - i for i, sev in enumerate(EVENT_SEVERITIES)}
EVENT_SEVERITY = {"critical": "critical", "major": "warning", "minor": "warning", "warning": "warning"}
EVENT_SEVERITY_OF_STATUS = {"fail": "critical", "warn": "warning", "error": "info", "ok": "info"}
