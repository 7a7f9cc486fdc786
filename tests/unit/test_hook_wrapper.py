"""The Slurm hook wrapper (fleetctl/audit/hook.sh) run for real by /bin/sh, with hostile settings files
and a fake fleetctl: it never runs its settings as shell, and it fails open on bad settings
(docs/security.md)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from importlib import resources
from pathlib import Path

import pytest


FAKE = """#!/bin/sh
# Records how the wrapper called it, then exits with $FAKE_RC (or hangs with FAKE_RC=hang).
python3 - "$@" <<'EOF' >"$FAKE_OUT"
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items()
                                                if k.startswith(("FLEETCTL", "LD_", "FAKE_X"))}}))
EOF
[ "$FAKE_RC" = hang ] && exec sleep 60
exit "${FAKE_RC:-0}"
"""


# /bin/sh is dash on Debian and bash on RHEL-like nodes: run the wrapper under both where present.
SHELLS = sorted({os.path.realpath(sh) for sh in ("/bin/sh", "/bin/dash", "/bin/bash") if os.path.exists(sh)})


@pytest.fixture(params=SHELLS)
def hookdir(request, tmp_path):
    d = tmp_path / "hook dir"  # a space in the install directory too
    d.mkdir()
    source = resources.files("fleetctl.audit").joinpath("hook.sh").read_text()
    for name in ("prolog", "epilog", "healthcheck"):
        path = d / f"fleetctl-{name}"
        path.write_text(source)
        path.chmod(0o755)
    fake = tmp_path / "fake-fleetctl"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    (d / ".shell").write_text(request.param)
    return d


def wrapper(hookdir: Path, settings: str | bytes | None, *, hook="prolog", rc="0", timeout=20):
    """Run the wrapper; return (exit code, what the fake fleetctl saw or None, stderr, marker made)."""
    tmp = hookdir.parent
    if settings is not None:
        mode = "wb" if isinstance(settings, bytes) else "w"
        with open(hookdir / "fleetctl-hooks.env", mode) as fh:
            fh.write(settings.replace("MARK", str(tmp / "pwned")) if isinstance(settings, str) else settings)
    seen = tmp / "seen.json"
    seen.unlink(missing_ok=True)
    env = {"PATH": os.environ["PATH"], "FLEETCTL": str(tmp / "fake-fleetctl"), "FAKE_RC": rc,
           "FAKE_OUT": str(seen), "FLEETCTL_HOOK_LOG": str(tmp / "hooks.log")}
    shell = (hookdir / ".shell").read_text()
    out = subprocess.run([shell, str(hookdir / f"fleetctl-{hook}")], env=env, capture_output=True,
                         text=True, timeout=timeout, cwd=tmp)
    called = json.loads(seen.read_text()) if seen.exists() and seen.stat().st_size else None
    return out.returncode, called, out.stderr, (tmp / "pwned").exists()


@pytest.mark.parametrize("line", [
    "FLEETCTL_SITE=/etc/site.toml;touch MARK",
    "FLEETCTL_SITE=/etc/site.toml;touch MARK;",
    "FLEETCTL_SITE=$(touch MARK)",
    "FLEETCTL_SITE=`touch MARK`",
    'FLEETCTL_SITE="$(touch MARK)"',
    "FLEETCTL_SITE=x && touch MARK",
    "FLEETCTL_SITE=x | touch MARK",
    "touch MARK",
    "$(touch MARK)=1",
    "FLEETCTL_SITE=x\ntouch MARK",
    "FLEETCTL_SITE=x\n;touch MARK",
    "FLEETCTL_SITE=x\\\ntouch MARK",
    "FLEETCTL_PROLOG_BUDGET=$(touch MARK)",
    "FLEETCTL_PROLOG_BUDGET=5;touch MARK",
    "FLEETCTL_FAIL_CLOSED=0;touch MARK",
    "FLEETCTL_HOOK_LOG=/dev/null;touch MARK",
])
def test_settings_are_never_run(hookdir, line):
    code, called, err, pwned = wrapper(hookdir, line + "\n")
    assert not pwned, err
    assert code == 0 and called is not None, err
    assert called["argv"][:2] == ["hook", "prolog"]


def test_values_are_taken_literally(hookdir):
    site = "/srv/my site;x/$(id)`id`\\n 'a'.toml"
    code, called, err, _ = wrapper(hookdir, f"# comment\n  FLEETCTL_SITE={site}\n")
    assert code == 0 and called["env"]["FLEETCTL_SITE"] == site, err


@pytest.mark.parametrize("text, value", [
    ("FLEETCTL_SITE='/srv/a b.toml'\n", "/srv/a b.toml"),
    ('FLEETCTL_SITE="/srv/a b.toml"\n', "/srv/a b.toml"),
    ("export FLEETCTL_SITE=/srv/x.toml\r\n", "/srv/x.toml"),
    ("FLEETCTL_SITE=/srv/no-newline.toml", "/srv/no-newline.toml"),
    ("FLEETCTL_SITE=/first\nFLEETCTL_SITE=/second\n", "/second"),
])
def test_quotes_crlf_export_and_last_line(hookdir, text, value):
    code, called, err, _ = wrapper(hookdir, text)
    assert code == 0 and called["env"]["FLEETCTL_SITE"] == value, err


def test_unknown_keys_are_ignored_and_logged(hookdir):
    code, called, err, _ = wrapper(hookdir, "LD_PRELOAD=/tmp/evil.so\nFAKE_X=1\nPATH=/nowhere\n")
    assert code == 0 and called is not None, err  # PATH from the file did not hide the fake's sh
    assert "LD_PRELOAD" not in called["env"] and "FAKE_X" not in called["env"]
    assert "unknown key LD_PRELOAD; ignored" in err


@pytest.mark.parametrize("text", [
    'FLEETCTL_SITE="/srv/site.toml\n',  # unterminated quote
    "FLEETCTL_SITE='/srv/site.toml\n",
    "FLEETCTL_SITE\n",
    "=\n;\n'\n\"\n",
    "\x00\x01\xff\xfe garbage \x1b[31m\n",
])
def test_broken_settings_fail_open(hookdir, text):
    code, called, err, _ = wrapper(hookdir, text.encode("latin-1"))
    assert code == 0 and called is not None, err
    assert "settings:" in err


def test_a_huge_settings_file_is_ignored(hookdir):
    code, called, err, _ = wrapper(hookdir, "FLEETCTL_SITE=/x\n" + "#" * 70000 + "\n")
    assert code == 0 and "larger than 64 KiB" in err and "FLEETCTL_SITE" not in called["env"]


@pytest.mark.parametrize("budget, passed", [
    ("2.5", "2.5"), ("007", "7"), ("10.25", "10.25"), ("599", "599"),
    ("0.5", "5"), ("0", "5"), ("600", "5"), ("-1", "5"), ("nan", "5"), ("inf", "5"), ("1e9", "5"),
    ("99999999999999999999", "5"), ("2.5.1", "5"), (".5", "5"), ("5.", "5"), ("5 ;x", "5"), ("", "5"),
])
def test_budget_is_validated_with_a_default(hookdir, budget, passed):
    code, called, err, _ = wrapper(hookdir, f"FLEETCTL_PROLOG_BUDGET={budget}\n")
    assert code == 0 and called["argv"] == ["hook", "prolog", "--budget", passed], err
    if passed == "5" and budget:
        assert "is not a number of seconds" in err


def test_healthcheck_budget_stays_under_slurms_limit(hookdir):
    code, called, err, _ = wrapper(hookdir, "FLEETCTL_HEALTHCHECK_BUDGET=59\n", hook="healthcheck")
    assert code == 0 and called["argv"][-1] == "30"


@pytest.mark.parametrize("hook, rc, fail_closed, expected", [
    ("prolog", "0", "0", 0),
    ("prolog", "2", "0", 1),   # the one definite verdict that fails a Prolog
    ("epilog", "2", "0", 0),   # the epilog drains by itself
    ("prolog", "3", "0", 0),   # fleetctl itself failed: fail open
    ("prolog", "1", "0", 0),
    ("prolog", "3", "1", 1),   # unless the site asks to fail closed
    ("prolog", "3", "yes", 0),  # an invalid FLEETCTL_FAIL_CLOSED is 0
    ("healthcheck", "137", "0", 0),
])
def test_exit_codes(hookdir, hook, rc, fail_closed, expected):
    code, _, err, _ = wrapper(hookdir, f"FLEETCTL_FAIL_CLOSED={fail_closed}\n", hook=hook, rc=rc)
    assert code == expected, err


def test_a_hanging_fleetctl_is_cut_at_the_budget_and_fails_open(hookdir):
    start = time.monotonic()
    code, _, err, _ = wrapper(hookdir, "FLEETCTL_PROLOG_BUDGET=1.5\n", rc="hang")
    assert code == 0 and "timed out" in err and time.monotonic() - start < 10


def test_a_missing_fleetctl_fails_open(hookdir):
    code, called, err, _ = wrapper(hookdir, "FLEETCTL=/nonexistent/fleetctl\n")
    assert code == 0 and called is None and "not found" in err
