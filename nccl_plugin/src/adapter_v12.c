/* ncclNet_v12 over the fleet core: a context per NCCL communicator from init (the transport
 * keeps no per-communicator state, so one shared context serves), finalize, setNetAttr
 * (hints this transport does not use). */
#include "fleet.h"
#include "fleet_net_v12.h"

static int ctx_token_v12;

static ncclResult_t init_v12(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                            ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)comm_id; (void)config; (void)prof;
    *ctx = &ctx_token_v12;
    return fleet_init(logger);
}

static ncclResult_t finalize_v12(void *ctx)
{
    (void)ctx;
    return ncclSuccess;
}

static ncclResult_t set_attr_v12(void *ctx, ncclNetAttr_v12_t *attr)
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

static ncclResult_t listen_v12(void *ctx, int dev, void *handle, void **listen)
{
    (void)ctx;
    return fleet_listen(dev, handle, listen);
}

static ncclResult_t connect_v12(void *ctx, int dev, void *handle, void **comm,
                               ncclNetDeviceHandle_v12_t **dev_comm)
{
    (void)ctx;
    if (dev_comm) *dev_comm = NULL;
    return fleet_connect(dev, handle, comm);
}

static ncclResult_t accept_v12(void *listen, void **comm, ncclNetDeviceHandle_v12_t **dev_comm)
{
    if (dev_comm) *dev_comm = NULL;
    return fleet_accept(listen, comm);
}

static ncclResult_t isend_v12(void *comm, void *data, size_t size, int tag, void *mh, void *ph, void **req)
{
    (void)tag; (void)mh; (void)ph;
    return fleet_isend(comm, data, size, req);
}

static ncclResult_t irecv_v12(void *comm, int n, void **data, size_t *sizes, int *tags, void **mh,
                             void **ph, void **req)
{
    (void)tags; (void)mh; (void)ph;
    return fleet_irecv(comm, n, data, sizes, req);
}

__attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = "fleet",
    .init = init_v12,
    .devices = fleet_devices,
    .getProperties = props_v12,
    .listen = listen_v12,
    .connect = connect_v12,
    .accept = accept_v12,
    .regMr = fleet_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = fleet_dereg_mr,
    .isend = isend_v12,
    .irecv = irecv_v12,
    .iflush = fleet_iflush,
    .test = fleet_test,
    .closeSend = fleet_close_send,
    .closeRecv = fleet_close_recv,
    .closeListen = fleet_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = finalize_v12,
    .setNetAttr = set_attr_v12,
};
