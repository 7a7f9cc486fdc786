/* What every ABI adapter shares: initialisation, device properties and memory registration
 * (host memory only). */
#include <stdlib.h>
#include "fleet.h"

static int initialised;
static ncclResult_t init_result;
static int mr_token;   /* host memory needs no registration: every mhandle points here */

ncclResult_t fleet_init(ncclDebugLogger_t logger)
{
    pthread_mutex_lock(&fleet_lock);
    if (logger) fleet_logger = logger;
    if (!initialised) {
        initialised = 1;
        init_result = fleet_config_load();
        if (init_result == ncclSuccess) {
            fleet_link_start();
            for (int d = 0; d < fleet_cfg.ndevs; d++)
                FLEET_INFO("NET/fleet: device %d %s, %d paths", d, fleet_cfg.dev[d].name,
                           fleet_cfg.dev[d].npaths);
        }
    }
    pthread_mutex_unlock(&fleet_lock);
    return init_result;
}

ncclResult_t fleet_devices(int *ndev)
{
    *ndev = fleet_cfg.ndevs;
    return ncclSuccess;
}

ncclResult_t fleet_props(int dev, struct fleet_props *p)
{
    if (dev < 0 || dev >= fleet_cfg.ndevs) return ncclInvalidArgument;
    p->name = fleet_cfg.dev[dev].name;
    p->guid = (uint64_t)dev;
    p->speed = fleet_cfg.dev[dev].speed_mbps;
    p->max_recvs = 1;
    p->max_comms = FLEET_MAX_COMMS;
    p->max_bytes = FLEET_MAX_MSG;
    return ncclSuccess;
}

ncclResult_t fleet_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    (void)comm; (void)data; (void)size;
    *mhandle = NULL;
    if (type != NCCL_PTR_HOST) return ncclInternalError;
    *mhandle = &mr_token;
    return ncclSuccess;
}

ncclResult_t fleet_dereg_mr(void *comm, void *mhandle)
{
    (void)comm; (void)mhandle;
    return ncclSuccess;
}

ncclResult_t fleet_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request)
{
    /* host memory is coherent once received: nothing to flush */
    (void)recv_comm; (void)n; (void)data; (void)sizes; (void)mhandles;
    *request = NULL;
    return ncclSuccess;
}
