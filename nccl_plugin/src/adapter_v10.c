/* ncclNet_v10 over the fleet core: profiler callback (unused), comm config (traffic class
 * unused), profiler handles on isend/irecv (unused). */
#include "fleet.h"
#include "fleet_net_v10.h"

static ncclResult_t init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)prof;
    return fleet_init(logger);
}

static ncclResult_t props_v10(int dev, ncclNetProperties_v10_t *p)
{
    struct fleet_props fp;
    ncclResult_t rc = fleet_props(dev, &fp);
    if (rc != ncclSuccess) return rc;
    *p = (ncclNetProperties_v10_t){ .name = fp.name, .pciPath = NULL, .guid = fp.guid,
        .ptrSupport = NCCL_PTR_HOST, .regIsGlobal = 0, .forceFlush = 0, .speed = fp.speed,
        .port = 0, .latency = 0, .maxComms = fp.max_comms, .maxRecvs = fp.max_recvs,
        .netDeviceType = NCCL_NET_DEVICE_HOST, .netDeviceVersion = 0,
        .vProps = { .ndevs = 1, .devs = { dev } }, .maxP2pBytes = fp.max_bytes,
        .maxCollBytes = fp.max_bytes };
    return ncclSuccess;
}

static ncclResult_t connect_v10(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **comm,
                                ncclNetDeviceHandle_v10_t **dev_comm)
{
    (void)config;
    if (dev_comm) *dev_comm = NULL;
    return fleet_connect(dev, handle, comm);
}

static ncclResult_t accept_v10(void *listen, void **comm, ncclNetDeviceHandle_v10_t **dev_comm)
{
    if (dev_comm) *dev_comm = NULL;
    return fleet_accept(listen, comm);
}

static ncclResult_t isend_v10(void *comm, void *data, size_t size, int tag, void *mh, void *ph, void **req)
{
    (void)tag; (void)mh; (void)ph;
    return fleet_isend(comm, data, size, req);
}

static ncclResult_t irecv_v10(void *comm, int n, void **data, size_t *sizes, int *tags, void **mh,
                              void **ph, void **req)
{
    (void)tags; (void)mh; (void)ph;
    return fleet_irecv(comm, n, data, sizes, req);
}

__attribute__((visibility("default"))) const ncclNet_v10_t ncclNetPlugin_v10 = {
    .name = "fleet",
    .init = init_v10,
    .devices = fleet_devices,
    .getProperties = props_v10,
    .listen = fleet_listen,
    .connect = connect_v10,
    .accept = accept_v10,
    .regMr = fleet_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = fleet_dereg_mr,
    .isend = isend_v10,
    .irecv = irecv_v10,
    .iflush = fleet_iflush,
    .test = fleet_test,
    .closeSend = fleet_close_send,
    .closeRecv = fleet_close_recv,
    .closeListen = fleet_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};
