/* Internal interface of the fleet transport: one core, thin per-version ABI adapters. */
#ifndef FLEET_H
#define FLEET_H

#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include "fleet_nccl_abi.h"

#define FLEET_MAX_DEVS 16
#define FLEET_MAX_PATHS 8
#define FLEET_MAX_REQS 32          /* NCCL_NET_MAX_REQUESTS of current NCCL; older NCCL uses 8 */
#define FLEET_MAX_MSG (1UL << 30)  /* bound on one message; advertised as maxP2pBytes */
#define FLEET_INBOX 16
#define FLEET_MAX_COMMS 65536      /* listen and receive comms held per device; advertised as maxComms */
#define FLEET_PENDING 64           /* accepted sockets waiting for their HELLO, per listening socket */

#define FLEET_HIDDEN __attribute__((visibility("hidden")))

struct fleet_path_cfg {
    char ifname[IF_NAMESIZE];
    struct in_addr addr;
    int link;                      /* index into the link-state table */
};

struct fleet_dev {
    char name[96];
    int npaths;
    int speed_mbps;
    struct fleet_path_cfg path[FLEET_MAX_PATHS];
};

struct fleet_config {
    int ndevs;
    struct fleet_dev dev[FLEET_MAX_DEVS];
    int holddown_ms;
    int user_timeout_ms;
    int ack_timeout_ms;
    int connect_timeout_ms;
    int hello_timeout_ms;          /* an accepted socket must say HELLO within this */
    int dead_grace_ms;
    uint32_t chunk;
    char log_path[256];
    char counters_dir[200];
};

extern FLEET_HIDDEN struct fleet_config fleet_cfg;
extern FLEET_HIDDEN pthread_mutex_t fleet_lock;
extern FLEET_HIDDEN ncclDebugLogger_t fleet_logger;

#define FLEET_WARN(...) do { if (fleet_logger) fleet_logger(NCCL_LOG_WARN, ~0UL, __FILE__, __LINE__, __VA_ARGS__); } while (0)
#define FLEET_INFO(...) do { if (fleet_logger) fleet_logger(NCCL_LOG_INFO, FLEET_NCCL_SUBSYS_NET, __func__, __LINE__, __VA_ARGS__); } while (0)

uint64_t fleet_now_ms(void) FLEET_HIDDEN;

/* config.c */
ncclResult_t fleet_config_load(void) FLEET_HIDDEN;

/* linkstate.c: interface up/down from netlink (RTMGRP_LINK), sysfs operstate as fallback */
int fleet_link_register(const char *ifname) FLEET_HIDDEN;
void fleet_link_start(void) FLEET_HIDDEN;
void fleet_link_poll(uint64_t now) FLEET_HIDDEN;          /* caller holds fleet_lock */
int fleet_link_up(int link, uint64_t *changed_ms) FLEET_HIDDEN;  /* caller holds fleet_lock */
const char *fleet_link_name(int link) FLEET_HIDDEN;

/* events.c: JSON-lines event log and the counters file */
struct fleet_counters {
    uint64_t connections, paths_up, path_down, replayed_bytes, replayed_msgs, failbacks,
        bytes_sent, bytes_received, dup_chunks, errors, reconnect_failures;
};
extern FLEET_HIDDEN struct fleet_counters fleet_ctr;   /* guarded by fleet_lock */
void fleet_event(const char *event, uint64_t conn_id, int path, const char *ifname,
                 const char *reason, uint64_t value) FLEET_HIDDEN;  /* takes no lock */
void fleet_counters_flush(uint64_t now, int force) FLEET_HIDDEN;   /* caller holds fleet_lock */

/* Wire format: a 40-byte little-endian frame header, payload only for DATA. */
enum { FR_DATA = 1, FR_ACK = 2, FR_HELLO = 3, FR_HELLO_ACK = 4, FR_PATH_DOWN = 5, FR_BYE = 6, FR_HEARTBEAT = 7 };
#define FLEET_MAGIC 0x31544c46u   /* "FLT1" */
#define FLEET_FRAME 40

struct fleet_frame {
    uint32_t magic;
    uint8_t type;
    uint8_t path;
    uint16_t gen;
    uint32_t len;      /* payload bytes that follow (DATA) */
    uint32_t aux;      /* HELLO: npaths | chunk_kb << 8 */
    uint64_t seq;      /* DATA/ACK: message sequence; HELLO: listen token */
    uint64_t off;      /* DATA: byte offset; HELLO: connection id */
    uint64_t total;    /* DATA: message size */
};
void fleet_frame_pack(uint8_t *buf, const struct fleet_frame *f) FLEET_HIDDEN;
int fleet_frame_unpack(const uint8_t *buf, struct fleet_frame *f) FLEET_HIDDEN;

/* The handle NCCL carries from listen() to connect(): where each path of the device listens. */
struct fleet_handle {
    uint32_t magic;
    uint16_t npaths;
    uint16_t chunk_kb;
    uint64_t token;
    struct { uint32_t addr; uint16_t port; uint16_t pad; } path[FLEET_MAX_PATHS];
};
/* the last 8 bytes of NCCL's handle buffer stay zero on the wire (comm.c keeps a connect's tag there) */
_Static_assert(sizeof(struct fleet_handle) + 8 <= NCCL_NET_HANDLE_MAXSIZE, "handle too large");

/* listener.c (with registry.c): one listening socket per local path address, shared by every listenComm,
 * kept for the process lifetime so that a sender can reconnect a path after NCCL closed
 * the listenComm. Accepted sockets are dispatched by their HELLO to an inbox. */
struct fleet_inbox_item { int fd; int path; uint16_t gen; int npaths; uint32_t chunk; uint64_t conn_id; };
struct fleet_inbox { int n, reg; struct fleet_inbox_item item[FLEET_INBOX]; };   /* reg: registry slot */
ncclResult_t fleet_listener_ports(int dev, uint16_t *ports) FLEET_HIDDEN;
void fleet_listener_poll(uint64_t now) FLEET_HIDDEN;   /* caller holds fleet_lock */
/* registration fails, with a warning, past FLEET_MAX_COMMS comms of the device */
ncclResult_t fleet_registry_add(int kind, uint64_t key, int dev, struct fleet_inbox *box) FLEET_HIDDEN;
ncclResult_t fleet_registry_add_locked(int kind, uint64_t key, int dev, struct fleet_inbox *box) FLEET_HIDDEN;
void fleet_registry_del(struct fleet_inbox *box) FLEET_HIDDEN;
struct fleet_inbox *fleet_registry_find(uint64_t conn_id, uint64_t token) FLEET_HIDDEN;   /* caller holds fleet_lock */
enum { REG_LISTEN = 1, REG_RECV = 2 };
void fleet_global_poll(void) FLEET_HIDDEN;   /* takes fleet_lock */

/* transport.c */
ncclResult_t fleet_listen(int dev, void *handle, void **listen_comm) FLEET_HIDDEN;
ncclResult_t fleet_connect(int dev, void *handle, void **send_comm) FLEET_HIDDEN;
ncclResult_t fleet_accept(void *listen_comm, void **recv_comm) FLEET_HIDDEN;
ncclResult_t fleet_isend(void *send_comm, void *data, size_t size, void **request) FLEET_HIDDEN;
ncclResult_t fleet_irecv(void *recv_comm, int n, void **data, const size_t *sizes, void **request) FLEET_HIDDEN;
ncclResult_t fleet_test(void *request, int *done, int *sizes) FLEET_HIDDEN;
ncclResult_t fleet_close_send(void *comm) FLEET_HIDDEN;
ncclResult_t fleet_close_recv(void *comm) FLEET_HIDDEN;
ncclResult_t fleet_close_listen(void *comm) FLEET_HIDDEN;

/* core.c: what every adapter shares */
ncclResult_t fleet_init(ncclDebugLogger_t logger) FLEET_HIDDEN;
ncclResult_t fleet_devices(int *ndev) FLEET_HIDDEN;
ncclResult_t fleet_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) FLEET_HIDDEN;
ncclResult_t fleet_dereg_mr(void *comm, void *mhandle) FLEET_HIDDEN;
ncclResult_t fleet_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles, void **request) FLEET_HIDDEN;

/* Properties common to all versions; adapters copy them into their own struct. */
struct fleet_props {
    char *name;
    uint64_t guid;
    int speed;
    int max_recvs;
    int max_comms;
    size_t max_bytes;
};
ncclResult_t fleet_props(int dev, struct fleet_props *p) FLEET_HIDDEN;

#endif
