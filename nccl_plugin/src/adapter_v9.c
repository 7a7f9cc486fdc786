/* ncclNet_v9 over v10: no profiler callback in init, no comm config on connect, no profiler
 * handles on isend/irecv. The properties are v10's (the same layout). */
#include "adapters.h"

ncclResult_t fleet_v9_init(ncclDebugLogger_t logger)
{
    return ncclNetPlugin_v10.init(logger, NULL);
}

ncclResult_t fleet_v9_connect(int dev, void *handle, void **comm, ncclNetDeviceHandle_v9_t **dev_comm)
{
    return ncclNetPlugin_v10.connect(dev, NULL, handle, comm, dev_comm);
}

static ncclResult_t isend_v9(void *comm, void *data, size_t size, int tag, void *mh, void **req)
{
    return ncclNetPlugin_v10.isend(comm, data, size, tag, mh, NULL, req);
}

static ncclResult_t irecv_v9(void *comm, int n, void **data, size_t *sizes, int *tags, void **mh, void **req)
{
    return ncclNetPlugin_v10.irecv(comm, n, data, sizes, tags, mh, NULL, req);
}

__attribute__((visibility("default"))) const ncclNet_v9_t ncclNetPlugin_v9 = {
    FLEET_NET_SHARED_MEMBERS,
    .init = fleet_v9_init,
    .getProperties = fleet_v10_props,
    .listen = fleet_v10_listen,
    .connect = fleet_v9_connect,
    .accept = fleet_v12_accept,
    .isend = isend_v9,
    .irecv = irecv_v9,
    .makeVDevice = NULL,
};
