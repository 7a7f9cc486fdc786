"""fleetctl's entry point (the `fleetctl` script, the .deb's /usr/bin/fleetctl, the node bundle,
`python -m fleetctl`): the Slurm hooks' fast path (fleetctl.audit.hook_entry) for the wrapper's
exact command line, else the CLI."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["hook"]:  # only then: the hooks' module is not light
        from fleetctl.audit.hook_entry import fast_hook_args, run_fast

        hook = fast_hook_args(args)
        if hook is not None:
            sys.exit(run_fast(*hook))
    from fleetctl.cli import main as cli_main

    cli_main(argv)
