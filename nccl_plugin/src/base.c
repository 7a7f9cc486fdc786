/* The ground every other file stands on: the clock, the lock, NCCL's logger, the configuration
 * (filled by config.c) and the frame codec. Depends on nothing of the plugin. */
#include <endian.h>
#include <string.h>
#include <time.h>
#include "fleet.h"

FLEET_HIDDEN pthread_mutex_t fleet_lock = PTHREAD_MUTEX_INITIALIZER;
FLEET_HIDDEN ncclDebugLogger_t fleet_logger;
FLEET_HIDDEN struct fleet_config fleet_cfg;

uint64_t fleet_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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
