/* What every ABI adapter shares: initialisation, device properties, memory registration
 * (host memory only), the frame codec and the clock. */
#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fleet.h"

FLEET_HIDDEN pthread_mutex_t fleet_lock = PTHREAD_MUTEX_INITIALIZER;
FLEET_HIDDEN ncclDebugLogger_t fleet_logger;
static int initialised;
static ncclResult_t init_result;
static int mr_token;   /* host memory needs no registration: every mhandle points here */

uint64_t fleet_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

ncclResult_t fleet_init(ncclDebugLogger_t logger)
{
    pthread_mutex_lock(&fleet_lock);
    if (logger) fleet_logger = logger;
    if (!initialised) {
        initialised = 1;
        init_result = fleet_config_load();
        if (init_result == ncclSuccess) {
            fleet_link_start();
            for (int d = 0; d < fleet_cfg.ndevs; d++)
                FLEET_INFO("NET/fleet: device %d %s, %d paths", d, fleet_cfg.dev[d].name,
                           fleet_cfg.dev[d].npaths);
        }
    }
    pthread_mutex_unlock(&fleet_lock);
    return init_result;
}

ncclResult_t fleet_devices(int *ndev)
{
    *ndev = fleet_cfg.ndevs;
    return ncclSuccess;
}

ncclResult_t fleet_props(int dev, struct fleet_props *p)
{
    if (dev < 0 || dev >= fleet_cfg.ndevs) return ncclInvalidArgument;
    p->name = fleet_cfg.dev[dev].name;
    p->guid = (uint64_t)dev;
    p->speed = fleet_cfg.dev[dev].speed_mbps;
    p->max_recvs = 1;
    p->max_comms = FLEET_MAX_COMMS;
    p->max_bytes = FLEET_MAX_MSG;
    return ncclSuccess;
}

ncclResult_t fleet_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle)
{
    (void)comm; (void)data; (void)size;
    *mhandle = NULL;
    if (type != NCCL_PTR_HOST) return ncclInternalError;
    *mhandle = &mr_token;
    return ncclSuccess;
}

ncclResult_t fleet_dereg_mr(void *comm, void *mhandle)
{
    (void)comm; (void)mhandle;
    return ncclSuccess;
}

ncclResult_t fleet_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request)
{
    /* host memory is coherent once received: nothing to flush */
    (void)recv_comm; (void)n; (void)data; (void)sizes; (void)mhandles;
    *request = NULL;
    return ncclSuccess;
}

void fleet_frame_pack(uint8_t *b, const struct fleet_frame *f)
{
    uint32_t u32;
    uint16_t u16;
    uint64_t u64;
    u32 = htole32(f->magic); memcpy(b, &u32, 4);
    b[4] = f->type;
    b[5] = f->path;
    u16 = htole16(f->gen); memcpy(b + 6, &u16, 2);
    u32 = htole32(f->len); memcpy(b + 8, &u32, 4);
    u32 = htole32(f->aux); memcpy(b + 12, &u32, 4);
    u64 = htole64(f->seq); memcpy(b + 16, &u64, 8);
    u64 = htole64(f->off); memcpy(b + 24, &u64, 8);
    u64 = htole64(f->total); memcpy(b + 32, &u64, 8);
}

int fleet_frame_unpack(const uint8_t *b, struct fleet_frame *f)
{
    uint32_t u32;
    uint16_t u16;
    uint64_t u64;
    memcpy(&u32, b, 4); f->magic = le32toh(u32);
    f->type = b[4];
    f->path = b[5];
    memcpy(&u16, b + 6, 2); f->gen = le16toh(u16);
    memcpy(&u32, b + 8, 4); f->len = le32toh(u32);
    memcpy(&u32, b + 12, 4); f->aux = le32toh(u32);
    memcpy(&u64, b + 16, 8); f->seq = le64toh(u64);
    memcpy(&u64, b + 24, 8); f->off = le64toh(u64);
    memcpy(&u64, b + 32, 8); f->total = le64toh(u64);
    if (f->magic != FLEET_MAGIC || f->type < FR_DATA || f->type > FR_HEARTBEAT) return -1;
    if (f->type != FR_DATA && f->len != 0) return -1;
    return 0;
}
