"""The Slurm hooks' fast path: `fleetctl hook prolog|epilog|healthcheck [--budget S]` exactly as the
wrapper (hook.sh) runs it, without click and the CLI's command table.

slurmd runs the Prolog before every job on every node, and a Prolog's time is the job's: loading
click and the CLI is about a quarter of an installed Prolog's ~100 ms. fleetctl.entry takes this path
only for that exact command line with FLEETCTL_SITE set; any other form (--format json, --level,
--site, a budget that is not a plain number in range, no site in the environment) goes to the CLI,
which does the same through fleetctl.cli.hook.run. tests/cli/test_hook_fast_path.py runs both paths
and compares what they print, log and return.
"""

from __future__ import annotations

import os
import re
import sys

from fleetctl.audit.hooks import DEFAULT_LEVEL, HOOKS, MAX_HOOK_BUDGET_S
from fleetctl.errors import EXIT_INTERRUPTED, FleetctlError, InternalError

_NUMBER = re.compile(r"[0-9]{1,6}(\.[0-9]{1,6})?")
MIN_BUDGET_S = 0.5  # the CLI's --budget range (fleetctl.cli.hook.run)


def fast_hook_args(argv: list[str], environ=os.environ) -> tuple[str, float | None] | None:
    """(hook, budget) when `argv` is the wrapper's command line, else None (the CLI takes it)."""
    if len(argv) not in (2, 4) or argv[0] != "hook" or argv[1] not in HOOKS or not environ.get("FLEETCTL_SITE"):
        return None
    if len(argv) == 2:
        return argv[1], None
    if argv[2] != "--budget" or not _NUMBER.fullmatch(argv[3]):
        return None
    budget = float(argv[3])
    return (argv[1], budget) if MIN_BUDGET_S <= budget <= MAX_HOOK_BUDGET_S else None


def run_fast(hook: str, budget: float | None, environ=os.environ) -> int:
    """The hook's verdict printed and logged as `fleetctl hook HOOK` prints it; its exit code."""
    from fleetctl.audit.hooks import judge_and_record
    from fleetctl.config import load_site

    try:
        verdict, line = judge_and_record(lambda: load_site(environ["FLEETCTL_SITE"]), hook, DEFAULT_LEVEL[hook],
                                         budget, warn=lambda text: print(text, file=sys.stderr))
        print(line, flush=True)
        return verdict.exit_code
    except FleetctlError as exc:
        print(exc.report_text(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fleetctl: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - as the CLI's one exit point: a bug is a line, not a traceback
        error = InternalError.from_exception(exc)
        print(error.report_text(), file=sys.stderr)
        return error.exit_code
