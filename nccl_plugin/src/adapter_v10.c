/* ncclNet_v10 over v11: no per-communicator context (init takes the logger and the profiler
 * callback; one context kept here for listen and connect), the comm config on connect (its traffic
 * class unused), no finalize or setNetAttr, no maxMultiRequestSize. */
#include "adapters.h"

static void *ctx_v10;

static ncclResult_t init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    return ncclNetPlugin_v11.init(&ctx_v10, 0, NULL, logger, prof);
}

ncclResult_t fleet_v10_props(int dev, ncclNetProperties_v10_t *p)
{
    ncclNetProperties_v11_t p11;
    ncclResult_t rc = ncclNetPlugin_v11.getProperties(dev, &p11);
    if (rc != ncclSuccess) return rc;
    *p = (ncclNetProperties_v10_t){ .name = p11.name, .pciPath = p11.pciPath, .guid = p11.guid,
        .ptrSupport = p11.ptrSupport, .regIsGlobal = p11.regIsGlobal, .forceFlush = p11.forceFlush,
        .speed = p11.speed, .port = p11.port, .latency = p11.latency, .maxComms = p11.maxComms,
        .maxRecvs = p11.maxRecvs, .netDeviceType = p11.netDeviceType, .netDeviceVersion = p11.netDeviceVersion,
        .vProps = p11.vProps, .maxP2pBytes = p11.maxP2pBytes, .maxCollBytes = p11.maxCollBytes };
    return ncclSuccess;
}

ncclResult_t fleet_v10_listen(int dev, void *handle, void **listen)
{
    return ncclNetPlugin_v11.listen(ctx_v10, dev, handle, listen);
}

static ncclResult_t connect_v10(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **comm,
                                ncclNetDeviceHandle_v10_t **dev_comm)
{
    (void)config;
    return ncclNetPlugin_v11.connect(ctx_v10, dev, handle, comm, dev_comm);
}

__attribute__((visibility("default"))) const ncclNet_v10_t ncclNetPlugin_v10 = {
    FLEET_NET_SHARED_MEMBERS,
    .init = init_v10,
    .getProperties = fleet_v10_props,
    .listen = fleet_v10_listen,
    .connect = connect_v10,
    .accept = fleet_v12_accept,
    .isend = fleet_v12_isend,
    .irecv = fleet_v12_irecv,
    .makeVDevice = NULL,
};
