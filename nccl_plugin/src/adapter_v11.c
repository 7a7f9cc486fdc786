/* ncclNet_v11 over the fleet core: a context per NCCL communicator from init (the transport
 * keeps no per-communicator state, so one shared context serves), finalize, setNetAttr
 * (hints this transport does not use). */
#include "fleet.h"
#include "fleet_net_v11.h"

static int ctx_token_v11;

static ncclResult_t init_v11(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                            ncclDebugLogger_t logger, ncclProfilerCallback_t prof)
{
    (void)comm_id; (void)config; (void)prof;
    *ctx = &ctx_token_v11;
    return fleet_init(logger);
}

static ncclResult_t finalize_v11(void *ctx)
{
    (void)ctx;
    return ncclSuccess;
}

static ncclResult_t set_attr_v11(void *ctx, ncclNetAttr_v11_t *attr)
{
    (void)ctx; (void)attr;
    return ncclSuccess;
}

static ncclResult_t props_v11(int dev, ncclNetProperties_v11_t *p)
{
    struct fleet_props fp;
    ncclResult_t rc = fleet_props(dev, &fp);
    if (rc != ncclSuccess) return rc;
    *p = (ncclNetProperties_v11_t){ .name = fp.name, .pciPath = NULL, .guid = fp.guid,
        .ptrSupport = NCCL_PTR_HOST, .regIsGlobal = 0, .forceFlush = 0, .speed = fp.speed,
        .port = 0, .latency = 0, .maxComms = fp.max_comms, .maxRecvs = fp.max_recvs,
        .netDeviceType = NCCL_NET_DEVICE_HOST, .netDeviceVersion = 0,
        .vProps = { .ndevs = 1, .devs = { dev } }, .maxP2pBytes = fp.max_bytes,
        .maxCollBytes = fp.max_bytes, .maxMultiRequestSize = 1, };
    return ncclSuccess;
}

static ncclResult_t listen_v11(void *ctx, int dev, void *handle, void **listen)
{
    (void)ctx;
    return fleet_listen(dev, handle, listen);
}

static ncclResult_t connect_v11(void *ctx, int dev, void *handle, void **comm,
                               ncclNetDeviceHandle_v11_t **dev_comm)
{
    (void)ctx;
    if (dev_comm) *dev_comm = NULL;
    return fleet_connect(dev, handle, comm);
}

static ncclResult_t accept_v11(void *listen, void **comm, ncclNetDeviceHandle_v11_t **dev_comm)
{
    if (dev_comm) *dev_comm = NULL;
    return fleet_accept(listen, comm);
}

static ncclResult_t isend_v11(void *comm, void *data, size_t size, int tag, void *mh, void *ph, void **req)
{
    (void)tag; (void)mh; (void)ph;
    return fleet_isend(comm, data, size, req);
}

static ncclResult_t irecv_v11(void *comm, int n, void **data, size_t *sizes, int *tags, void **mh,
                             void **ph, void **req)
{
    (void)tags; (void)mh; (void)ph;
    return fleet_irecv(comm, n, data, sizes, req);
}

__attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = "fleet",
    .init = init_v11,
    .devices = fleet_devices,
    .getProperties = props_v11,
    .listen = listen_v11,
    .connect = connect_v11,
    .accept = accept_v11,
    .regMr = fleet_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = fleet_dereg_mr,
    .isend = isend_v11,
    .irecv = irecv_v11,
    .iflush = fleet_iflush,
    .test = fleet_test,
    .closeSend = fleet_close_send,
    .closeRecv = fleet_close_recv,
    .closeListen = fleet_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = finalize_v11,
    .setNetAttr = set_attr_v11,
};
