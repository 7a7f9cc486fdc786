/* ncclNet_v9 over the fleet core: size_t sizes, max transfer sizes, no NIC fusion
 * (makeVDevice NULL: the plugin groups NICs itself, from FLEET_NET_IFACES). */
#include "fleet.h"
#include "fleet_net_v9.h"

static ncclResult_t props_v9(int dev, ncclNetProperties_v9_t *p)
{
    struct fleet_props fp;
    ncclResult_t rc = fleet_props(dev, &fp);
    if (rc != ncclSuccess) return rc;
    *p = (ncclNetProperties_v9_t){ .name = fp.name, .pciPath = NULL, .guid = fp.guid,
        .ptrSupport = NCCL_PTR_HOST, .regIsGlobal = 0, .forceFlush = 0, .speed = fp.speed,
        .port = 0, .latency = 0, .maxComms = fp.max_comms, .maxRecvs = fp.max_recvs,
        .netDeviceType = NCCL_NET_DEVICE_HOST, .netDeviceVersion = 0,
        .vProps = { .ndevs = 1, .devs = { dev } }, .maxP2pBytes = fp.max_bytes,
        .maxCollBytes = fp.max_bytes };
    return ncclSuccess;
}

static ncclResult_t connect_v9(int dev, void *handle, void **comm, ncclNetDeviceHandle_v9_t **dev_comm)
{
    if (dev_comm) *dev_comm = NULL;
    return fleet_connect(dev, handle, comm);
}

static ncclResult_t accept_v9(void *listen, void **comm, ncclNetDeviceHandle_v9_t **dev_comm)
{
    if (dev_comm) *dev_comm = NULL;
    return fleet_accept(listen, comm);
}

static ncclResult_t isend_v9(void *comm, void *data, size_t size, int tag, void *mh, void **req)
{
    (void)tag; (void)mh;
    return fleet_isend(comm, data, size, req);
}

static ncclResult_t irecv_v9(void *comm, int n, void **data, size_t *sizes, int *tags, void **mh, void **req)
{
    (void)tags; (void)mh;
    return fleet_irecv(comm, n, data, sizes, req);
}

__attribute__((visibility("default"))) const ncclNet_v9_t ncclNetPlugin_v9 = {
    .name = "fleet",
    .init = fleet_init,
    .devices = fleet_devices,
    .getProperties = props_v9,
    .listen = fleet_listen,
    .connect = connect_v9,
    .accept = accept_v9,
    .regMr = fleet_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = fleet_dereg_mr,
    .isend = isend_v9,
    .irecv = irecv_v9,
    .iflush = fleet_iflush,
    .test = fleet_test,
    .closeSend = fleet_close_send,
    .closeRecv = fleet_close_recv,
    .closeListen = fleet_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
};
