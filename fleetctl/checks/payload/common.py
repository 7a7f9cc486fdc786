"""Result records, the deadline, and tolerant readers shared by every node check."""

from __future__ import annotations

import json
import os
import subprocess
import time

SCHEMA = "fleetctl.checks/1"
STATUSES = ("ok", "skipped", "warn", "error", "fail")  # worst last
ACTIONS = ("none", "restart-app", "reset-gpu", "reboot", "drain", "inspect-hardware")  # strongest last


def result(code, status, message, action="none", evidence=None, subject="", simulated=False):
    """One check result, JSON-ready. `code` is stable (`gpu.ecc.dbe`); `subject` names the part."""
    assert status in STATUSES and action in ACTIONS, (status, action)
    out = {"code": code, "status": status, "message": message, "action": action,
           "subject": subject, "evidence": evidence or {}}
    if simulated:
        out["simulated"] = True
    return out


def worst_status(statuses):
    return max(statuses, key=STATUSES.index, default="ok")


def strongest_action(actions):
    return max(actions, key=ACTIONS.index, default="none")


class Deadline:
    """A hard wall-clock budget counted from the interpreter's own start when /proc tells it."""

    def __init__(self, budget_s, count_process_age=True):
        self.budget_s = budget_s
        self.started = time.monotonic() - (process_age_s() if count_process_age else 0.0)
        self.at = self.started + budget_s if budget_s else None

    def left(self):
        return float("inf") if self.at is None else self.at - time.monotonic()

    def expired(self):
        return self.left() <= 0

    def timeout(self, wanted):
        """A subprocess timeout: `wanted`, but never past the deadline (minimum 0.05 s)."""
        return max(0.05, min(wanted, self.left()))


def process_age_s():
    """Seconds since this process started (interpreter start included); 0 where /proc lacks it."""
    try:
        with open("/proc/self/stat") as f:
            # The command name may hold spaces and parentheses: fields are counted after the last ')'.
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def read_text(path):
    """The stripped content of a small file, or raise OSError (callers turn that into `error`)."""
    with open(path, "rb") as f:
        return f.read(65536).decode("utf-8", "replace").strip()


def read_or_none(path):
    try:
        return read_text(path)
    except OSError:
        return None


def to_int(text):
    try:
        return int(str(text).strip(), 0)
    except (TypeError, ValueError):
        return None


def which(name, extra_dirs=("/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin")):
    """Path of an executable on PATH (or the usual sbin dirs, which cron and prolog PATHs lack)."""
    dirs = os.environ.get("PATH", "").split(os.pathsep) + list(extra_dirs)
    for d in dirs:
        p = os.path.join(d, name)
        if d and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def run_cmd(argv, deadline, timeout=10.0, env=None):
    """Run a tool; return (rc, stdout, stderr). rc None: not found; rc 'timeout': killed at timeout."""
    exe = argv[0] if os.sep in argv[0] else which(argv[0])
    if exe is None:
        return None, "", "%s not found" % argv[0]
    try:
        proc = subprocess.run([exe] + list(argv[1:]), stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=deadline.timeout(timeout), env=env)
    except subprocess.TimeoutExpired:
        return "timeout", "", "%s timed out" % argv[0]
    except OSError as exc:
        return None, "", "%s: %s" % (argv[0], exc)
    return (proc.returncode, proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"))


def load_state(path):
    """The node's small state file (Xid boots, counter snapshots); empty when absent or corrupt."""
    if not path:
        return {}
    try:
        with open(path) as f:
            state = json.load(f)
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def save_state(path, state):
    """Write atomically; a state file that cannot be written only loses escalation memory."""
    if not path:
        return None
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = "%s.tmp.%d" % (path, os.getpid())
        with open(tmp, "w") as f:
            json.dump(state, f, sort_keys=True)
        os.replace(tmp, path)
        return None
    except OSError as exc:
        return str(exc)


def boot_id(override=None):
    return override or read_or_none("/proc/sys/kernel/random/boot_id") or "unknown"
