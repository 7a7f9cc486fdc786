/* The ABI adapters, chained like NCCL's example plugins: adapter_v12.c adapts the core to the
 * newest ABI; each older adapter adds only its difference over the next newer one, calling that
 * version's table where arguments or properties change and reusing its functions where they do
 * not. What an older adapter reuses is declared here. */
#ifndef FLEET_ADAPTERS_H
#define FLEET_ADAPTERS_H

#include "fleet.h"
#include "fleet_net_v12.h"

/* The members that are the same functions in every version's table. */
#define FLEET_NET_SHARED_MEMBERS \
    .name = "fleet", .devices = fleet_devices, .regMr = fleet_reg_mr, .regMrDmaBuf = NULL, \
    .deregMr = fleet_dereg_mr, .iflush = fleet_iflush, .test = fleet_test, .closeSend = fleet_close_send, \
    .closeRecv = fleet_close_recv, .closeListen = fleet_close_listen, .getDeviceMr = NULL, .irecvConsumed = NULL

extern const ncclNet_v12_t ncclNetPlugin_v12;
extern const ncclNet_v11_t ncclNetPlugin_v11;
extern const ncclNet_v10_t ncclNetPlugin_v10;
extern const ncclNet_v9_t ncclNetPlugin_v9;

/* v12 (and v11, whose types are the same but for the properties) */
ncclResult_t fleet_v12_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v12_t *config,
                            ncclDebugLogger_t logger, ncclProfilerCallback_t prof) FLEET_HIDDEN;
ncclResult_t fleet_v12_finalize(void *ctx) FLEET_HIDDEN;
ncclResult_t fleet_v12_set_attr(void *ctx, ncclNetAttr_v12_t *attr) FLEET_HIDDEN;
ncclResult_t fleet_v12_listen(void *ctx, int dev, void *handle, void **listen) FLEET_HIDDEN;
ncclResult_t fleet_v12_connect(void *ctx, int dev, void *handle, void **comm,
                               ncclNetDeviceHandle_v12_t **dev_comm) FLEET_HIDDEN;
ncclResult_t fleet_v12_accept(void *listen, void **comm, ncclNetDeviceHandle_v12_t **dev_comm) FLEET_HIDDEN;
ncclResult_t fleet_v12_isend(void *comm, void *data, size_t size, int tag, void *mh, void *ph,
                             void **req) FLEET_HIDDEN;
ncclResult_t fleet_v12_irecv(void *comm, int n, void **data, size_t *sizes, int *tags, void **mh,
                             void **ph, void **req) FLEET_HIDDEN;
/* v10 (and v9: the same properties and listen) */
ncclResult_t fleet_v10_props(int dev, ncclNetProperties_v10_t *p) FLEET_HIDDEN;
ncclResult_t fleet_v10_listen(int dev, void *handle, void **listen) FLEET_HIDDEN;
/* v9 (and v8: the same init and connect) */
ncclResult_t fleet_v9_init(ncclDebugLogger_t logger) FLEET_HIDDEN;
ncclResult_t fleet_v9_connect(int dev, void *handle, void **comm, ncclNetDeviceHandle_v9_t **dev_comm) FLEET_HIDDEN;

#endif
