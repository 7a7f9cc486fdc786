/* spank_fleetctl: the dispatcher. Slurm calls the slurm_spank_* entry points in every context; each
 * switches on spank_context() and calls the file for that context. */
#include <string.h>

#include "fleetctl.h"

SPANK_PLUGIN(spank_fleetctl, 1)

struct fleet_config fleet_config;
struct fleet_choice fleet_choice;

/* A bad plugstack.conf: init fails (Slurm refuses the job when the plugstack line says `required`;
 * with `optional` it goes on) and the plugin stays inert, never acting on half-parsed settings. */
static int fleet_inert;

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    /* Options are registered in every context: srun parses them, slurmstepd receives them. */
    fleet_inert = 1;
    if (fleet_config_parse(ac, av) != 0)
        return -1;   /* a bad plugstack.conf is the admin's error: always an error */
    fleet_inert = 0;
    return fleet_options_register(sp);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (fleet_inert)
        return 0;
    switch (spank_context()) {
    case S_CTX_LOCAL:
    case S_CTX_ALLOCATOR:
        return fleet_local_post_opt(sp);
    case S_CTX_REMOTE:
        return fleet_remote_post_opt(sp);
    default:
        return 0;
    }
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (fleet_inert || spank_context() != S_CTX_REMOTE)
        return 0;
    return fleet_remote_user_init(sp);
}
