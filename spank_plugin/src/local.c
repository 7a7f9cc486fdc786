/* Local and allocator context (srun, sbatch, salloc): the choices go to the Prolog and Epilog as
 * SPANK_FLEET_* through the job control environment. */
#include "fleetctl.h"

static int set(spank_t sp, const char *name, const char *value)
{
    spank_err_t err = spank_job_control_setenv(sp, name, value, 1);

    if (err != ESPANK_SUCCESS) {
        slurm_error("spank_fleetctl: local: job_control_setenv %s: %s", name, spank_strerror(err));
        return -1;
    }
    return 0;
}

int fleet_local_post_opt(spank_t sp)
{
    int rv = -1;
    const char *failover = fleet_failover_effective() == FLEET_FAILOVER_OFF ? "off" : "auto";

    if (set(sp, "FLEET_FAILOVER", failover) != 0)
        goto fail;
    if (fleet_choice.lens && set(sp, "FLEET_LENS", "1") != 0)
        goto fail;
    if (fleet_choice.snapshot[0] && set(sp, "FLEET_SNAPSHOT", fleet_choice.snapshot) != 0)
        goto fail;
    rv = 0;
fail:
    return fleet_result(rv);
}
