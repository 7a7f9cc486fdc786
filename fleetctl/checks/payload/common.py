"""Result records, the deadline, and tolerant readers shared by every node check."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
import tempfile
import time

SCHEMA = "fleetctl.checks/1"
STATUSES = ("ok", "skipped", "warn", "error", "fail")  # worst last
# The one ranking of check statuses, here because the payload needs it too: how bad each is, with
# `skipped` no worse than `ok` (the controller imports it from here: checks.document, checks.followup).
RANK = {s: max(0, i - 1) for i, s in enumerate(STATUSES)}
ACTIONS = ("none", "restart-app", "reset-gpu", "reboot", "drain", "inspect-hardware")  # strongest last


def result(code, status, message, action="none", evidence=None, subject=""):
    """One check result, JSON-ready. `code` is stable (`gpu.ecc.dbe`); `subject` names the part."""
    assert status in STATUSES and action in ACTIONS, (status, action)
    return {"code": code, "status": status, "message": message, "action": action,
            "subject": subject, "evidence": evidence or {}}


def marked_simulated(results, simulated):
    """The results, each marked `"simulated": true` when what they judged came from the lab's GPU file
    (checks.simulated_gpus) rather than NVML: the one place a result learns its provenance."""
    if simulated:
        for r in results:
            r["simulated"] = True
    return results


def worst_status(statuses):
    """The worst of `statuses` ("ok" for none); `skipped` counts as worse than `ok` only here,
    so that a document of skipped checks says so."""
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


def number_or_none(text, kind=int):
    """kind(text), or None for a value that is missing or no such number (a sysfs file that says
    "N/A", a cut-off table cell)."""
    try:
        return kind(text)
    except (TypeError, ValueError):
        return None


def to_int(text):
    """An integer written in any base Python reads (sysfs prints a LID in hex: 0x1a), or None."""
    return number_or_none(str(text).strip(), lambda digits: int(digits, 0))


def json_argument(argv, not_object):
    """The payload's one argument, a JSON object ({} when there is none): argv is the script's
    arguments (None: sys.argv[1:]); ValueError (`not_object`) for any other JSON value."""
    argv = sys.argv[1:] if argv is None else argv
    args = json.loads(argv[0]) if argv else {}
    if not isinstance(args, dict):
        raise ValueError(not_object)
    return args


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


MAX_STATE_BYTES = 1 << 20  # the state file holds a few hundred small entries
STATE_LOCK_WAIT_S = 2.0


def load_state(path):
    """The node's small state file (Xid boots, counter snapshots, acknowledgements); empty when absent,
    corrupt, too large or not a regular file (a FIFO must not hang a Prolog)."""
    if not path:
        return {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_STATE_BYTES:
            return {}
        state = json.loads(os.read(fd, MAX_STATE_BYTES + 1).decode("utf-8", "replace"))
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError, RecursionError):
        return {}
    finally:
        os.close(fd)


def merge_state(current, before, after):
    """Apply what this run changed (`before` -> `after`) onto `current`, the file as it is now.

    A Prolog and a HealthCheck may run the checks on one node at once; each writes only the keys it
    changed, dicts merged key by key, so neither erases the other's update."""
    merged = dict(current)
    for key in set(before) | set(after):
        if key not in after:
            merged.pop(key, None)
        elif before.get(key) != after[key]:
            if isinstance(after[key], dict) and isinstance(before.get(key), dict) \
                    and isinstance(merged.get(key), dict):
                merged[key] = merge_state(merged[key], before[key], after[key])
            else:
                merged[key] = after[key]
    return merged


def save_state(path, before, after):
    """Merge this run's changes into the state file under an exclusive lock and replace it atomically
    (private temp file beside it, fsync, rename). Returns an error text or None: a state file that
    cannot be written only loses escalation memory, never the verdict."""
    if not path:
        return None
    lock_fd = None
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        lock_fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        give_up = time.monotonic() + STATE_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > give_up:
                    return "%s: locked by another fleetctl for more than %.0f s" % (path, STATE_LOCK_WAIT_S)
                time.sleep(0.02)
        state = merge_state(load_state(path), before, after)
        data = json.dumps(state, sort_keys=True).encode()
        if len(data) > MAX_STATE_BYTES:
            return "%s: state would exceed %d bytes; not written" % (path, MAX_STATE_BYTES)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".state.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return None
    except OSError as exc:
        return "%s: %s" % (path, exc.strerror or exc)
    finally:
        if lock_fd is not None:
            os.close(lock_fd)  # releases the lock


def boot_id(override=None):
    return override or read_or_none("/proc/sys/kernel/random/boot_id") or "unknown"
