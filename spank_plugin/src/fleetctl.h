/* spank_fleetctl: shared state of the SPANK plugin (admin configuration and the user's choices). */
#ifndef SPANK_FLEETCTL_H
#define SPANK_FLEETCTL_H

#include <stddef.h>
#include <slurm/spank.h>

#define FLEET_PATH_MAX 1024   /* plugin_dir and --fleet-snapshot: bounded, absolute */
#define FLEET_IFACES_MAX 256
#define FLEET_LIB "libnccl-net-fleet.so"
#define FLEET_DEFAULT_PLUGIN_DIR "/usr/lib/fleetctl"

enum fleet_failover { FLEET_FAILOVER_UNSET = 0, FLEET_FAILOVER_AUTO, FLEET_FAILOVER_OFF };

/* plugstack.conf arguments, parsed into a zeroed struct with defaults. */
struct fleet_config {
    char plugin_dir[FLEET_PATH_MAX];
    char ifaces[FLEET_IFACES_MAX];      /* "" when the admin set none */
    char env_file[FLEET_PATH_MAX];      /* "" when none: `fleetctl failover plan --write-env` output */
    char counters_dir[FLEET_PATH_MAX];  /* "" when off: the users' counters directories go below it */
    enum fleet_failover default_failover;
    int allow_off;
    int required;
};

/* The user's options (srun/sbatch/salloc), as the option callbacks saw them. */
struct fleet_choice {
    enum fleet_failover failover;       /* UNSET: the admin's default */
    int lens;
    char snapshot[FLEET_PATH_MAX];      /* "" when not given */
};

extern struct fleet_config fleet_config;
extern struct fleet_choice fleet_choice;

int fleet_config_parse(int ac, char **av);
int fleet_options_register(spank_t sp);
enum fleet_failover fleet_failover_effective(void);
int fleet_path_valid(const char *path);
/* A value as an error message shows it: at most 64 bytes, a control character as '?', so that
 * what an admin or a user typed can never add a line to Slurm's log. Returns buf. */
#define FLEET_SHOWN 72
const char *fleet_shown(const char *value, char *buf, size_t len);
/* A plugin error: fatal (-1) only when the admin said required=yes. */
int fleet_result(int rv);

int fleet_local_post_opt(spank_t sp);   /* local/allocator: Prolog/Epilog environment */
int fleet_remote_post_opt(spank_t sp);  /* remote (slurmstepd, still root): the counters directory */
int fleet_remote_user_init(spank_t sp); /* remote (slurmstepd): the tasks' environment */

#endif
