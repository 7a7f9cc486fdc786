/* ncclNet_v12 over the fleet core, the newest ABI; the older adapters build on this one. A context
 * per NCCL communicator from init (the transport keeps no per-communicator state, so one shared
 * context serves), finalize, setNetAttr (hints this transport does not use), profiler handles and
 * device handles unused, railId/planeId undefined. */
#include "adapters.h"

static int ctx_token;

ncclResult_t fleet_v12_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                            ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)comm_id; (void)config; (void)prof;
    *ctx = &ctx_token;
    return fleet_init(logger);
}

ncclResult_t fleet_v12_finalize(void *ctx)
{
    (void)ctx;
    return ncclSuccess;
}

ncclResult_t fleet_v12_set_attr(void *ctx, ncclNetAttr_v12_t *attr)
{
    (void)ctx; (void)attr;
    return ncclSuccess;
}

static ncclResult_t props_v12(int dev, ncclNetProperties_v12_t *p)
{
    struct fleet_props fp;
    ncclResult_t rc = fleet_props(dev, &fp);
    if (rc != ncclSuccess) return rc;
    *p = (ncclNetProperties_v12_t){ .name = fp.name, .pciPath = NULL, .guid = fp.guid,
        .ptrSupport = NCCL_PTR_HOST, .regIsGlobal = 0, .forceFlush = 0, .speed = fp.speed,
        .port = 0, .latency = 0, .maxComms = fp.max_comms, .maxRecvs = fp.max_recvs,
        .netDeviceType = NCCL_NET_DEVICE_HOST, .netDeviceVersion = 0,
        .vProps = { .ndevs = 1, .devs = { dev } }, .maxP2pBytes = fp.max_bytes,
        .maxCollBytes = fp.max_bytes, .maxMultiRequestSize = 1,
        .railId = -1, .planeId = -1, };
    return ncclSuccess;
}

ncclResult_t fleet_v12_listen(void *ctx, int dev, void *handle, void **listen)
{
    (void)ctx;
    return fleet_listen(dev, handle, listen);
}

ncclResult_t fleet_v12_connect(void *ctx, int dev, void *handle, void **comm, ncclNetDeviceHandle_v12_t **dev_comm)
{
    (void)ctx;
    if (dev_comm) *dev_comm = NULL;
    return fleet_connect(dev, handle, comm);
}

ncclResult_t fleet_v12_accept(void *listen, void **comm, ncclNetDeviceHandle_v12_t **dev_comm)
{
    if (dev_comm) *dev_comm = NULL;
    return fleet_accept(listen, comm);
}

ncclResult_t fleet_v12_isend(void *comm, void *data, size_t size, int tag, void *mh, void *ph, void **req)
{
    (void)tag; (void)mh; (void)ph;
    return fleet_isend(comm, data, size, req);
}

ncclResult_t fleet_v12_irecv(void *comm, int n, void **data, size_t *sizes, int *tags, void **mh, void **ph,
                             void **req)
{
    (void)tags; (void)mh; (void)ph;
    return fleet_irecv(comm, n, data, sizes, req);
}

__attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    FLEET_NET_SHARED_MEMBERS,
    .init = fleet_v12_init,
    .getProperties = props_v12,
    .listen = fleet_v12_listen,
    .connect = fleet_v12_connect,
    .accept = fleet_v12_accept,
    .isend = fleet_v12_isend,
    .irecv = fleet_v12_irecv,
    .makeVDevice = NULL,
    .finalize = fleet_v12_finalize,
    .setNetAttr = fleet_v12_set_attr,
};
