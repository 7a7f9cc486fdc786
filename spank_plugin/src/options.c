/* The user's options. Callbacks run where srun/sbatch parse the command line (local/allocator) and
 * again in slurmstepd (remote), so each validates its argument itself. */
#include <string.h>

#include "fleetctl.h"

static int ctx_remote;

static const char *ctx_name(int remote)
{
    return remote ? "remote" : "local";
}

static int failover_cb(int val, const char *optarg, int remote)
{
    char shown[FLEET_SHOWN];

    (void)val;
    if (!optarg || strcmp(optarg, "auto") == 0) {
        fleet_choice.failover = FLEET_FAILOVER_AUTO;
    } else if (strcmp(optarg, "off") == 0) {
        if (!fleet_config.allow_off) {
            slurm_error("spank_fleetctl: %s: --fleet-failover=off: %s", ctx_name(remote),
                        "refused: the administrator does not allow turning failover off");
            return -1;
        }
        fleet_choice.failover = FLEET_FAILOVER_OFF;
    } else {
        slurm_error("spank_fleetctl: %s: --fleet-failover=%s: %s", ctx_name(remote), fleet_shown(optarg, shown, sizeof(shown)),
                    "invalid value (expected auto or off)");
        return -1;
    }
    return 0;
}

static int lens_cb(int val, const char *optarg, int remote)
{
    (void)val;
    (void)optarg;
    (void)remote;
    fleet_choice.lens = 1;
    return 0;
}

static int snapshot_cb(int val, const char *optarg, int remote)
{
    char shown[FLEET_SHOWN];

    (void)val;
    if (!optarg || !fleet_path_valid(optarg)) {
        slurm_error("spank_fleetctl: %s: --fleet-snapshot=%s: %s", ctx_name(remote),
                    fleet_shown(optarg ? optarg : "", shown, sizeof(shown)),
                    "not an absolute path of at most 1023 characters");
        return -1;
    }
    strcpy(fleet_choice.snapshot, optarg);   /* length checked above */
    return 0;
}

static struct spank_option options[] = {
    { "fleet-failover", "auto|off",
      "NCCL NIC failover (libnccl-net-fleet.so) for this job: auto or off", 1, 0, failover_cb },
    { "fleet-lens", NULL, "tag the job for fleetctl lens", 0, 0, lens_cb },
    { "fleet-snapshot", "DIR", "directory for the job's snapshots (absolute path)", 1, 0, snapshot_cb },
};

int fleet_options_register(spank_t sp)
{
    ctx_remote = spank_context() == S_CTX_REMOTE;
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++) {
        spank_err_t err = spank_option_register(sp, &options[i]);

        if (err != ESPANK_SUCCESS) {
            slurm_error("spank_fleetctl: %s: register --%s: %s", ctx_name(ctx_remote), options[i].name,
                        spank_strerror(err));
            return fleet_result(-1);
        }
    }
    return 0;
}

enum fleet_failover fleet_failover_effective(void)
{
    if (fleet_choice.failover != FLEET_FAILOVER_UNSET)
        return fleet_choice.failover;
    return fleet_config.default_failover;
}
