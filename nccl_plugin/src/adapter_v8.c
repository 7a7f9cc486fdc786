/* ncclNet_v8 over v9: int sizes on isend/irecv (a negative one refused), properties without
 * forceFlush, virtual devices or transfer sizes, no makeVDevice. */
#include "adapters.h"
#include "fleet_net_v8.h"

static ncclResult_t props_v8(int dev, ncclNetProperties_v8_t *p)
{
    ncclNetProperties_v9_t p9;
    ncclResult_t rc = ncclNetPlugin_v9.getProperties(dev, &p9);
    if (rc != ncclSuccess) return rc;
    *p = (ncclNetProperties_v8_t){ .name = p9.name, .pciPath = p9.pciPath, .guid = p9.guid,
        .ptrSupport = p9.ptrSupport, .regIsGlobal = p9.regIsGlobal, .speed = p9.speed, .port = p9.port,
        .latency = p9.latency, .maxComms = p9.maxComms, .maxRecvs = p9.maxRecvs,
        .netDeviceType = p9.netDeviceType, .netDeviceVersion = p9.netDeviceVersion };
    return ncclSuccess;
}

static ncclResult_t isend_v8(void *comm, void *data, int size, int tag, void *mh, void **req)
{
    if (size < 0) return ncclInvalidArgument;
    return ncclNetPlugin_v9.isend(comm, data, (size_t)size, tag, mh, req);
}

static ncclResult_t irecv_v8(void *comm, int n, void **data, int *sizes, int *tags, void **mh, void **req)
{
    if (n != 1 || sizes[0] < 0) { *req = NULL; return ncclInternalError; }
    size_t size = (size_t)sizes[0];
    return ncclNetPlugin_v9.irecv(comm, n, data, &size, tags, mh, req);
}

__attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
    FLEET_NET_SHARED_MEMBERS,
    .init = fleet_v9_init,
    .getProperties = props_v8,
    .listen = fleet_v10_listen,
    .connect = fleet_v9_connect,
    .accept = fleet_v12_accept,
    .isend = isend_v8,
    .irecv = irecv_v8,
};
