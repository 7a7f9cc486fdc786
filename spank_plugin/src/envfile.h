/* env_file=: KEY=VALUE lines written by `fleetctl failover plan --write-env` (the IB resiliency
 * variables, or the fleet plugin's), read whole and checked before anything is set. No Slurm here,
 * so the parser is tested on its own (tests/unit/test_spank_plugin.py). */
#ifndef SPANK_FLEETCTL_ENVFILE_H
#define SPANK_FLEETCTL_ENVFILE_H

#include <stddef.h>

#define FLEET_ENV_MAX_BYTES 65536
#define FLEET_ENV_MAX_VARS 64
#define FLEET_ENV_NAME_MAX 64
#define FLEET_ENV_VALUE_MAX 1024

struct fleet_env {
    int n;
    char name[FLEET_ENV_MAX_VARS][FLEET_ENV_NAME_MAX + 1];
    char value[FLEET_ENV_MAX_VARS][FLEET_ENV_VALUE_MAX + 1];
};

/* Parse `len` bytes of text; 0 ok, -1 with `why` (at most `why_len` bytes) naming the line. */
int fleet_env_parse(const char *text, size_t len, struct fleet_env *env, char *why, size_t why_len);
/* Open (no symlink), check (a regular file of root's, writable by nobody else, <= 64 KiB), read
 * and parse `path`; 0 ok, -1 with `why`. */
int fleet_env_load(const char *path, struct fleet_env *env, char *why, size_t why_len);

#endif
