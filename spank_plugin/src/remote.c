/* Remote context (slurmstepd): the tasks' environment. The NCCL plugin path comes only from the
 * admin's plugin_dir; a user's own NCCL_NET_PLUGIN is overwritten whenever failover is on. */
#include <stdio.h>
#include <string.h>

#include "envfile.h"
#include "fleetctl.h"

static int set(spank_t sp, const char *name, const char *value)
{
    spank_err_t err = spank_setenv(sp, name, value, 1);

    if (err != ESPANK_SUCCESS) {
        slurm_error("spank_fleetctl: remote: setenv %s: %s", name, spank_strerror(err));
        return -1;
    }
    return 0;
}

static int has(const struct fleet_env *env, const char *name)
{
    for (int i = 0; i < env->n; i++)
        if (strcmp(env->name[i], name) == 0)
            return 1;
    return 0;
}

/* env_file=: exactly the plan's variables. Without a library of its own in the file (the IB
 * resiliency route), a user's NCCL_NET_PLUGIN/NCCL_NET are removed: NCCL's IB transport runs. */
static int from_env_file(spank_t sp)
{
    static struct fleet_env env;
    char why[256];

    if (fleet_env_load(fleet_config.env_file, &env, why, sizeof(why)) != 0) {
        slurm_error("spank_fleetctl: remote: env_file=%s: %s", fleet_config.env_file, why);
        return -1;
    }
    for (int i = 0; i < env.n; i++)
        if (set(sp, env.name[i], env.value[i]) != 0)
            return -1;
    if (!has(&env, "NCCL_NET_PLUGIN"))
        for (const char **v = (const char *[]){ "NCCL_NET_PLUGIN", "NCCL_NET", NULL }; *v; v++)
            if (!has(&env, *v) && spank_unsetenv(sp, *v) != ESPANK_SUCCESS) {
                slurm_error("spank_fleetctl: remote: unsetenv %s: failed", *v);
                return -1;
            }
    return 0;
}

int fleet_remote_user_init(spank_t sp)
{
    int rv = -1;
    char lib[FLEET_PATH_MAX + sizeof(FLEET_LIB) + 1];
    int n;

    if (fleet_choice.snapshot[0] && set(sp, "FLEET_SNAPSHOT_DIR", fleet_choice.snapshot) != 0)
        goto fail;
    if (fleet_failover_effective() == FLEET_FAILOVER_OFF) {
        rv = 0;
        goto fail;
    }
    if (fleet_config.env_file[0]) {
        rv = from_env_file(sp);
        goto fail;
    }
    n = snprintf(lib, sizeof(lib), "%s/%s", fleet_config.plugin_dir, FLEET_LIB);
    if (n < 0 || (size_t)n >= sizeof(lib)) {
        slurm_error("spank_fleetctl: remote: plugin path: %s", "too long");
        goto fail;
    }
    if (set(sp, "NCCL_NET_PLUGIN", lib) != 0 || set(sp, "NCCL_NET", "fleet") != 0)
        goto fail;
    if (fleet_config.ifaces[0] && set(sp, "FLEET_NET_IFACES", fleet_config.ifaces) != 0)
        goto fail;
    rv = 0;
fail:
    return fleet_result(rv);
}
