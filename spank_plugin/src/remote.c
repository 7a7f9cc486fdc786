/* Remote context (slurmstepd): the job user's counters directory (as root, before privileges are
 * dropped) and the tasks' environment. The NCCL plugin path comes only from the admin's
 * plugin_dir; a user's own NCCL_NET_PLUGIN is overwritten whenever failover is on. */
#include <stdio.h>
#include <string.h>

#include "countersdir.h"
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

/* <counters_dir>/<uid>, once prepared: FLEET_NET_COUNTERS_DIR of the tasks */
static char counters_path[FLEET_PATH_MAX + 16];

int fleet_remote_post_opt(spank_t sp)
{
    uid_t uid;
    gid_t gid;
    spank_err_t err;
    char why[256];

    counters_path[0] = 0;
    if (fleet_failover_effective() == FLEET_FAILOVER_OFF || !fleet_config.counters_dir[0])
        return 0;
    if ((err = spank_get_item(sp, S_JOB_UID, &uid)) != ESPANK_SUCCESS ||
        (err = spank_get_item(sp, S_JOB_GID, &gid)) != ESPANK_SUCCESS) {
        slurm_error("spank_fleetctl: remote: the job's uid and gid: %s", spank_strerror(err));
        return fleet_result(-1);
    }
    if (fleet_counters_prepare(fleet_config.counters_dir, uid, gid, counters_path, sizeof(counters_path), why,
                               sizeof(why)) != 0) {
        slurm_error("spank_fleetctl: remote: counters_dir=%s: %s", fleet_config.counters_dir, why);
        counters_path[0] = 0;
        return fleet_result(-1);
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
    if (counters_path[0] && !has(&env, "FLEET_NET_COUNTERS_DIR") && set(sp, "FLEET_NET_COUNTERS_DIR", counters_path) != 0)
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
    if (counters_path[0] && set(sp, "FLEET_NET_COUNTERS_DIR", counters_path) != 0)
        goto fail;
    rv = 0;
fail:
    return fleet_result(rv);
}
