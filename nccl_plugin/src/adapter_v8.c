/* ncclNet_v8 over the fleet core: int sizes. */
#include <limits.h>
#include "fleet.h"
#include "fleet_net_v8.h"

static ncclResult_t props_v8(int dev, ncclNetProperties_v8_t *p)
{
    struct fleet_props fp;
    ncclResult_t rc = fleet_props(dev, &fp);
    if (rc != ncclSuccess) return rc;
    *p = (ncclNetProperties_v8_t){ .name = fp.name, .pciPath = NULL, .guid = fp.guid,
        .ptrSupport = NCCL_PTR_HOST, .regIsGlobal = 0, .speed = fp.speed, .port = 0,
        .latency = 0, .maxComms = fp.max_comms, .maxRecvs = fp.max_recvs,
        .netDeviceType = NCCL_NET_DEVICE_HOST, .netDeviceVersion = 0 };
    return ncclSuccess;
}

static ncclResult_t connect_v8(int dev, void *handle, void **comm, ncclNetDeviceHandle_v8_t **dev_comm)
{
    if (dev_comm) *dev_comm = NULL;
    return fleet_connect(dev, handle, comm);
}

static ncclResult_t accept_v8(void *listen, void **comm, ncclNetDeviceHandle_v8_t **dev_comm)
{
    if (dev_comm) *dev_comm = NULL;
    return fleet_accept(listen, comm);
}

static ncclResult_t isend_v8(void *comm, void *data, int size, int tag, void *mh, void **req)
{
    (void)tag; (void)mh;
    if (size < 0) return ncclInvalidArgument;
    return fleet_isend(comm, data, (size_t)size, req);
}

static ncclResult_t irecv_v8(void *comm, int n, void **data, int *sizes, int *tags, void **mh, void **req)
{
    (void)tags; (void)mh;
    if (n != 1 || sizes[0] < 0) { *req = NULL; return ncclInternalError; }
    size_t size = (size_t)sizes[0];
    return fleet_irecv(comm, n, data, &size, req);
}

__attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "fleet",
    .init = fleet_init,
    .devices = fleet_devices,
    .getProperties = props_v8,
    .listen = fleet_listen,
    .connect = connect_v8,
    .accept = accept_v8,
    .regMr = fleet_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = fleet_dereg_mr,
    .isend = isend_v8,
    .irecv = irecv_v8,
    .iflush = fleet_iflush,
    .test = fleet_test,
    .closeSend = fleet_close_send,
    .closeRecv = fleet_close_recv,
    .closeListen = fleet_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
};
