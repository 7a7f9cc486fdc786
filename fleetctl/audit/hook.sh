#!/bin/sh
# fleetctl Slurm hook wrapper: Prolog, Epilog or HealthCheckProgram, chosen by this file's name
# (fleetctl-prolog, fleetctl-epilog, fleetctl-healthcheck, or any name containing prolog, epilog or
# healthcheck, e.g. a link 50-fleetctl-prolog in a prolog.d directory). Installed by
# `fleetctl hook install DIR`.
#
# It bounds fleetctl's time and fails open: only a definite hardware verdict (fleetctl exit 2) makes
# a Prolog fail. A fleetctl that crashes, is missing, or runs out of time lets the job run, unless
# FLEETCTL_FAIL_CLOSED=1. Settings: fleetctl-hooks.env beside this file, else /etc/default/fleetctl.
here=$(dirname "$(readlink -f "$0")")
if [ -r "$here/fleetctl-hooks.env" ]; then . "$here/fleetctl-hooks.env"
elif [ -r /etc/default/fleetctl ]; then . /etc/default/fleetctl
fi
export FLEETCTL_SITE FLEETCTL_HOOK_LOG FLEETCTL_HOOK_STATE_DIR
# slurmd gives hooks no PATH.
PATH=${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}
export PATH
case "$(basename "$0")" in
    *prolog*) hook=prolog budget=${FLEETCTL_PROLOG_BUDGET:-5} ;;
    *epilog*) hook=epilog budget=${FLEETCTL_EPILOG_BUDGET:-10} ;;
    *healthcheck*) hook=healthcheck budget=${FLEETCTL_HEALTHCHECK_BUDGET:-30} ;;  # Slurm kills it at 60 s
    *) echo "fleetctl hook: cannot tell the hook from the name $0; doing nothing" >&2; exit 0 ;;
esac
fail_open() {
    msg="fleetctl $hook: $1; job allowed (fail-open)"
    [ "${FLEETCTL_FAIL_CLOSED:-0}" = 1 ] && msg="fleetctl $hook: $1; failing closed"
    echo "$msg" >&2
    [ -n "$FLEETCTL_HOOK_LOG" ] && echo "$(date +%Y-%m-%dT%H:%M:%S) $msg" >>"$FLEETCTL_HOOK_LOG" 2>/dev/null
    [ "${FLEETCTL_FAIL_CLOSED:-0}" = 1 ] && exit 1
    exit 0
}
command -v "${FLEETCTL:-fleetctl}" >/dev/null 2>&1 || fail_open "fleetctl not found (${FLEETCTL:-fleetctl})"
timeout -k 1 "$((budget + 1))" "${FLEETCTL:-fleetctl}" hook "$hook" --budget "$budget" </dev/null
rc=$?
case $rc in
    0) exit 0 ;;
    2) [ "$hook" = prolog ] && exit 1; exit 0 ;;  # definite failure: the node is drained already
    124|137) fail_open "timed out after ${budget}s" ;;
    *) fail_open "fleetctl exited $rc" ;;
esac
