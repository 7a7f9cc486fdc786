/* A hostile peer for libnccl-net-fleet.so, shared by tests/hostile.c (regression scenarios) and
 * tests/fuzz_net.c (the wire fuzzer). The library is dlopened and driven through its v12 table,
 * like NCCL does; the peer speaks the wire format from its own encoder (docs/failover.md), never
 * the plugin's, over real TCP sockets on 127.0.0.1 / 127.0.0.2. */
#ifndef FLEET_TEST_PEER_H
#define FLEET_TEST_PEER_H

#include <stddef.h>
#include <stdint.h>
#include "fleet_net_v12.h"

#define W_MAGIC 0x31544c46u
#define W_FRAME 40
#define W_MAX_PATHS 8
enum { W_DATA = 1, W_ACK = 2, W_HELLO = 3, W_HELLO_ACK = 4, W_PATH_DOWN = 5, W_BYE = 6, W_HEARTBEAT = 7 };

struct wframe {
    uint32_t magic;
    uint8_t type, path;
    uint16_t gen;
    uint32_t len, aux;
    uint64_t seq, off, total;
};
void wire_pack(uint8_t *b, const struct wframe *f);
void wire_unpack(const uint8_t *b, struct wframe *f);

/* The handle as the plugin lays it out (fleet.h struct fleet_handle, host byte order). */
struct hview {
    uint32_t magic;
    uint16_t npaths, chunk_kb;
    uint64_t token;
    uint32_t addr[W_MAX_PATHS];   /* network order */
    uint16_t port[W_MAX_PATHS];   /* host order */
};
void handle_get(const void *h, struct hview *v);
void handle_put(void *h, const struct hview *v);

struct plugin {
    const ncclNet_v12_t *net;
    void *ctx;
};
/* dlopen `lib` and init its v12 table. The logger keeps the plugin's warnings (plugin_warnings). */
int plugin_open(struct plugin *pl, const char *lib);
extern char plugin_warnings[8192];
extern int plugin_quiet;      /* 1: keep warnings but do not print them */
void plugin_warnings_clear(void);

double mono_s(void);
int tcp_connect(uint32_t addr_be, uint16_t port, int nonblock);
int write_all(int fd, const void *buf, size_t len, double timeout_s);

/* The plugin receives, the peer sends: listen, one socket per path with a HELLO, accept. */
struct rpeer {
    void *lc, *rc;
    int npaths;
    int fd[W_MAX_PATHS];
    uint64_t token, conn_id;
    uint32_t chunk;
    uint16_t gen[W_MAX_PATHS];
};
int rpeer_open(struct plugin *pl, struct rpeer *p, int npaths, uint32_t chunk_kb, double timeout_s);
/* The same on a listenComm already made (lc, with the handle listen() filled in). */
int rpeer_attach(struct plugin *pl, struct rpeer *p, void *lc, const void *handle, int npaths, uint32_t chunk_kb,
                 double timeout_s);
void rpeer_close(struct plugin *pl, struct rpeer *p);
int rpeer_frame(struct rpeer *p, int path, const struct wframe *f);
/* DATA header for (seq, off, total) with the len an honest sender would put, then `paylen` bytes
 * of payload from `payload` (fewer than len: the chunk stays unfinished on that path). */
int rpeer_data(struct rpeer *p, int path, uint64_t seq, uint64_t off, uint64_t total, const void *payload,
               size_t paylen);
void rpeer_drain(struct rpeer *p);   /* read and drop whatever the plugin wrote (acks, heartbeats) */

/* The plugin sends, the peer receives: the peer listens on its own sockets and hands the plugin a
 * handle naming them; connect() is driven until every path said HELLO and got HELLO_ACK. */
struct speer {
    void *sc;
    int npaths;
    int lfd[W_MAX_PATHS], fd[W_MAX_PATHS];
    uint16_t gen[W_MAX_PATHS];
    uint64_t conn_id;
    uint32_t chunk;
    char handle[NCCL_NET_HANDLE_MAXSIZE];
};
int speer_open(struct plugin *pl, struct speer *p, int npaths, double timeout_s);
void speer_close(struct plugin *pl, struct speer *p);
int speer_frame(struct speer *p, int path, const struct wframe *f);

#endif
