#!/bin/sh
# fleetctl Slurm hook wrapper: Prolog, Epilog or HealthCheckProgram, chosen by this file's name
# (fleetctl-prolog, fleetctl-epilog, fleetctl-healthcheck, or any name containing prolog, epilog or
# healthcheck, e.g. a link 50-fleetctl-prolog in a prolog.d directory). Installed by
# `fleetctl hook install DIR`.
#
# It bounds fleetctl's time and fails open: only a definite hardware verdict (fleetctl exit 2) makes
# a Prolog fail. A fleetctl that crashes, is missing, or runs out of time lets the job run, unless
# FLEETCTL_FAIL_CLOSED=1. Its own settings never make it fail: a bad one is logged and replaced by
# its default.
#
# Settings: fleetctl-hooks.env beside this file, else /etc/default/fleetctl, else the environment.
# The file is READ, never run as shell: one KEY=VALUE per line, only the keys below, the value taken
# literally (no $-expansion, no escapes; one pair of enclosing '...' or "..." is removed). '#' starts
# a comment line.
#   FLEETCTL                     the fleetctl command (default: fleetctl on PATH)
#   FLEETCTL_SITE                site file
#   FLEETCTL_FAIL_CLOSED         1: fail the Prolog when fleetctl itself fails (default 0)
#   FLEETCTL_HOOK_LOG            append one line per decision here
#   FLEETCTL_HOOK_STATE_DIR      job marks and last verdicts (default /run/fleetctl)
#   FLEETCTL_PROLOG_BUDGET       seconds, 1 <= s < 600 (default 5); decimals allowed
#   FLEETCTL_EPILOG_BUDGET       seconds, 1 <= s < 600 (default 10)
#   FLEETCTL_HEALTHCHECK_BUDGET  seconds, 1 <= s < 55 (default 30; Slurm kills it at 60 s)

# slurmd gives hooks no PATH.
PATH=${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}
export PATH
notes=""
note() { notes="$notes$1
"; }

read_settings() {  # $1: the settings file
    size=$(wc -c <"$1" 2>/dev/null) || { note "cannot read $1; using defaults"; return; }
    if [ "${size:-0}" -gt 65536 ]; then note "$1 is larger than 64 KiB; ignored"; return; fi
    cr=$(printf '\r')
    n=0
    while IFS= read -r line || [ -n "$line" ]; do
        n=$((n + 1))
        [ "$n" -gt 500 ] && { note "$1: more than 500 lines; the rest ignored"; break; }
        line=${line%"$cr"}
        line=${line#"${line%%[![:space:]]*}"}  # leading blanks
        case $line in ''|'#'*) continue ;; esac
        line=${line#export[[:space:]]}
        key=${line%%=*}
        if [ "$key" = "$line" ]; then note "$1:$n: not KEY=VALUE; ignored"; continue; fi
        value=${line#*=}
        case $value in
            \"*\") value=${value#\"}; value=${value%\"} ;;
            \'*\') value=${value#\'}; value=${value%\'} ;;
            \"*|\'*) note "$1:$n: $key: unterminated quote; ignored"; continue ;;
        esac
        # Plain assignments: the value is never expanded, split or run.
        case $key in
            FLEETCTL) FLEETCTL=$value ;;
            FLEETCTL_SITE) FLEETCTL_SITE=$value ;;
            FLEETCTL_FAIL_CLOSED) FLEETCTL_FAIL_CLOSED=$value ;;
            FLEETCTL_HOOK_LOG) FLEETCTL_HOOK_LOG=$value ;;
            FLEETCTL_HOOK_STATE_DIR) FLEETCTL_HOOK_STATE_DIR=$value ;;
            FLEETCTL_PROLOG_BUDGET) FLEETCTL_PROLOG_BUDGET=$value ;;
            FLEETCTL_EPILOG_BUDGET) FLEETCTL_EPILOG_BUDGET=$value ;;
            FLEETCTL_HEALTHCHECK_BUDGET) FLEETCTL_HEALTHCHECK_BUDGET=$value ;;
            *) note "$1:$n: unknown key $(printf '%.40s' "$key"); ignored" ;;
        esac
    done <"$1"
}

# Shell expansions instead of dirname and basename: each fork is a millisecond of every job's Prolog.
self=$(readlink -f "$0" 2>/dev/null) || self=$0
case $self in */*) here=${self%/*} ;; *) here=. ;; esac
if [ -r "$here/fleetctl-hooks.env" ]; then read_settings "$here/fleetctl-hooks.env"
elif [ -r /etc/default/fleetctl ]; then read_settings /etc/default/fleetctl
fi

case ${0##*/} in
    *prolog*) hook=prolog budget=${FLEETCTL_PROLOG_BUDGET:-5} default=5 max=600 ;;
    *epilog*) hook=epilog budget=${FLEETCTL_EPILOG_BUDGET:-10} default=10 max=600 ;;
    *healthcheck*) hook=healthcheck budget=${FLEETCTL_HEALTHCHECK_BUDGET:-30} default=30 max=55 ;;
    *) printf '%s\n' "fleetctl hook: cannot tell the hook from the name $0; doing nothing" >&2; exit 0 ;;
esac

# The budget: digits with an optional decimal part, 1 <= budget < max, else the default.
whole=${budget%%.*}
case $budget in
    ''|*[!0-9.]*|*.*.*|.*|*.) whole="" ;;
esac
while :; do case $whole in 0?*) whole=${whole#0} ;; *) break ;; esac; done
if [ -z "$whole" ] || [ ${#whole} -gt 4 ] || [ "$whole" -lt 1 ] || [ "$whole" -ge "$max" ]; then
    note "budget $(printf '%.40s' "$budget") is not a number of seconds from 1 to below $max; using $default"
    budget=$default whole=$default
else
    budget=$whole${budget#"${budget%%.*}"}  # leading zeros dropped, decimals kept
fi
case $budget in *.*) outer=$((whole + 2)) ;; *) outer=$((whole + 1)) ;; esac

case ${FLEETCTL_FAIL_CLOSED:-0} in
    0|1) ;;
    *) note "FLEETCTL_FAIL_CLOSED=$(printf '%.40s' "$FLEETCTL_FAIL_CLOSED") is not 0 or 1; using 0"
       FLEETCTL_FAIL_CLOSED=0 ;;
esac
export FLEETCTL_SITE FLEETCTL_HOOK_LOG FLEETCTL_HOOK_STATE_DIR

log() {
    printf '%s\n' "$1" >&2
    [ -n "$FLEETCTL_HOOK_LOG" ] && printf '%s %s\n' "$(date +%Y-%m-%dT%H:%M:%S)" "$1" >>"$FLEETCTL_HOOK_LOG" 2>/dev/null
    return 0
}
if [ -n "$notes" ]; then
    printf '%s' "$notes" | while IFS= read -r line; do log "fleetctl $hook: settings: $line"; done
fi
fail_open() {
    if [ "${FLEETCTL_FAIL_CLOSED:-0}" = 1 ]; then log "fleetctl $hook: $1; failing closed"; exit 1; fi
    log "fleetctl $hook: $1; job allowed (fail-open)"
    exit 0
}

command -v "${FLEETCTL:-fleetctl}" >/dev/null 2>&1 || fail_open "fleetctl not found (${FLEETCTL:-fleetctl})"
timeout -k 1 "$outer" "${FLEETCTL:-fleetctl}" hook "$hook" --budget "$budget" </dev/null
rc=$?
case $rc in
    0) exit 0 ;;
    2) [ "$hook" = prolog ] && exit 1; exit 0 ;;  # definite failure: the node is drained already
    124|137) fail_open "timed out after ${budget}s" ;;
    *) fail_open "fleetctl exited $rc" ;;
esac
