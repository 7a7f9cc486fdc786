/* ncclNet_v11 over v12: the properties lack railId/planeId and hold at most 4 devices per virtual
 * NIC; everything else is v12's. */
#include <string.h>
#include "adapters.h"

static ncclResult_t props_v11(int dev, ncclNetProperties_v11_t *p)
{
    ncclNetProperties_v12_t p12;
    ncclResult_t rc = ncclNetPlugin_v12.getProperties(dev, &p12);
    if (rc != ncclSuccess) return rc;
    *p = (ncclNetProperties_v11_t){ .name = p12.name, .pciPath = p12.pciPath, .guid = p12.guid,
        .ptrSupport = p12.ptrSupport, .regIsGlobal = p12.regIsGlobal, .forceFlush = p12.forceFlush,
        .speed = p12.speed, .port = p12.port, .latency = p12.latency, .maxComms = p12.maxComms,
        .maxRecvs = p12.maxRecvs, .netDeviceType = p12.netDeviceType, .netDeviceVersion = p12.netDeviceVersion,
        .maxP2pBytes = p12.maxP2pBytes, .maxCollBytes = p12.maxCollBytes,
        .maxMultiRequestSize = p12.maxMultiRequestSize };
    if (p12.vProps.ndevs > FLEET_NET_MAX_DEVS_PER_NIC_V9) return ncclInternalError;
    p->vProps.ndevs = p12.vProps.ndevs;
    memcpy(p->vProps.devs, p12.vProps.devs, (size_t)p12.vProps.ndevs * sizeof(int));
    return ncclSuccess;
}

__attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
    FLEET_NET_SHARED_MEMBERS,
    .init = fleet_v12_init,
    .getProperties = props_v11,
    .listen = fleet_v12_listen,
    .connect = fleet_v12_connect,
    .accept = fleet_v12_accept,
    .isend = fleet_v12_isend,
    .irecv = fleet_v12_irecv,
    .makeVDevice = NULL,
    .finalize = fleet_v12_finalize,
    .setNetAttr = fleet_v12_set_attr,
};
