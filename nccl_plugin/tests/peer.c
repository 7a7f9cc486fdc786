/* See peer.h. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "peer.h"

char plugin_warnings[8192];
int plugin_quiet;
static size_t warn_len;

double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void wire_pack(uint8_t *b, const struct wframe *f)
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

void wire_unpack(const uint8_t *b, struct wframe *f)
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
}

void handle_get(const void *h, struct hview *v)
{
    const char *b = h;
    memcpy(&v->magic, b, 4);
    memcpy(&v->npaths, b + 4, 2);
    memcpy(&v->chunk_kb, b + 6, 2);
    memcpy(&v->token, b + 8, 8);
    for (int i = 0; i < W_MAX_PATHS; i++) {
        memcpy(&v->addr[i], b + 16 + 8 * i, 4);
        memcpy(&v->port[i], b + 20 + 8 * i, 2);
    }
}

void handle_put(void *h, const struct hview *v)
{
    char *b = h;
    memcpy(b, &v->magic, 4);
    memcpy(b + 4, &v->npaths, 2);
    memcpy(b + 6, &v->chunk_kb, 2);
    memcpy(b + 8, &v->token, 8);
    for (int i = 0; i < W_MAX_PATHS; i++) {
        memcpy(b + 16 + 8 * i, &v->addr[i], 4);
        memcpy(b + 20 + 8 * i, &v->port[i], 2);
    }
}

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...)
{
    (void)flags; (void)file; (void)line;
    if (level != NCCL_LOG_WARN && !getenv("PEER_VERBOSE")) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level == NCCL_LOG_WARN) {
        int n = snprintf(plugin_warnings + warn_len, sizeof(plugin_warnings) - warn_len, "%s\n", msg);
        if (n > 0 && warn_len + (size_t)n < sizeof(plugin_warnings)) warn_len += (size_t)n;
    }
    if (!plugin_quiet) fprintf(stderr, "[plugin] %s\n", msg);
}

void plugin_warnings_clear(void)
{
    warn_len = 0;
    plugin_warnings[0] = 0;
}

int plugin_open(struct plugin *pl, const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen %s: %s\n", lib, dlerror()); return -1; }
    pl->net = dlsym(h, "ncclNetPlugin_v12");
    if (!pl->net) { fprintf(stderr, "%s: no ncclNetPlugin_v12\n", lib); return -1; }
    ncclResult_t rc = pl->net->init(&pl->ctx, 1, NULL, logger, NULL);
    if (rc != ncclSuccess) { fprintf(stderr, "init: %d\n", rc); return -1; }
    return 0;
}

int tcp_connect(uint32_t addr_be, uint16_t port, int nonblock)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = addr_be };
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && !(nonblock && errno == EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

int write_all(int fd, const void *buf, size_t len, double timeout_s)
{
    const char *b = buf;
    double end = mono_s() + timeout_s;
    while (len > 0) {
        ssize_t n = send(fd, b, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) { b += n; len -= (size_t)n; continue; }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
        if (mono_s() > end) return -1;
        struct pollfd pfd = { .fd = fd, .events = POLLOUT };
        poll(&pfd, 1, 1);
    }
    return 0;
}

static uint64_t rnd64(void)
{
    static uint64_t s = 0x9e3779b97f4a7c15ull;
    s ^= (uint64_t)mono_s() * 1000003u;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s ^ (s >> 29);
}

/* ---- the plugin receives ---- */

int rpeer_open(struct plugin *pl, struct rpeer *p, int npaths, uint32_t chunk_kb, double timeout_s)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL;
    if (pl->net->listen(pl->ctx, 0, handle, &lc) != ncclSuccess || !lc) return -1;
    return rpeer_attach(pl, p, lc, handle, npaths, chunk_kb, timeout_s);
}

int rpeer_attach(struct plugin *pl, struct rpeer *p, void *lc, const void *handle, int npaths, uint32_t chunk_kb,
                 double timeout_s)
{
    memset(p, 0, sizeof(*p));
    for (int i = 0; i < W_MAX_PATHS; i++) p->fd[i] = -1;
    p->lc = lc;
    struct hview h;
    handle_get(handle, &h);
    p->npaths = npaths < h.npaths ? npaths : h.npaths;
    p->token = h.token;
    p->conn_id = rnd64() | 1;
    p->chunk = chunk_kb * 1024u;
    for (int i = 0; i < p->npaths; i++) {
        p->fd[i] = tcp_connect(h.addr[i], h.port[i], 0);
        if (p->fd[i] < 0) return -1;
        p->gen[i] = 1;
        struct wframe f = { .magic = W_MAGIC, .type = W_HELLO, .path = (uint8_t)i, .gen = 1,
                            .aux = (uint32_t)npaths | (chunk_kb << 8), .seq = p->token, .off = p->conn_id };
        if (rpeer_frame(p, i, &f) != 0) return -1;
    }
    double end = mono_s() + timeout_s;
    while (!p->rc) {
        if (pl->net->accept(p->lc, &p->rc, NULL) != ncclSuccess) return -1;
        if (!p->rc && mono_s() > end) return -1;
    }
    return 0;
}

void rpeer_close(struct plugin *pl, struct rpeer *p)
{
    if (p->rc) pl->net->closeRecv(p->rc);
    if (p->lc) pl->net->closeListen(p->lc);
    for (int i = 0; i < W_MAX_PATHS; i++)
        if (p->fd[i] >= 0) close(p->fd[i]);
    memset(p, 0, sizeof(*p));
}

int rpeer_frame(struct rpeer *p, int path, const struct wframe *f)
{
    uint8_t b[W_FRAME];
    wire_pack(b, f);
    return write_all(p->fd[path], b, sizeof(b), 2.0);
}

int rpeer_data(struct rpeer *p, int path, uint64_t seq, uint64_t off, uint64_t total, const void *payload,
               size_t paylen)
{
    uint64_t len = total - off < p->chunk ? total - off : p->chunk;
    struct wframe f = { .magic = W_MAGIC, .type = W_DATA, .path = (uint8_t)path, .gen = p->gen[path],
                        .len = (uint32_t)len, .seq = seq, .off = off, .total = total };
    if (rpeer_frame(p, path, &f) != 0) return -1;
    return paylen ? write_all(p->fd[path], payload, paylen, 2.0) : 0;
}

void rpeer_drain(struct rpeer *p)
{
    char buf[4096];
    for (int i = 0; i < p->npaths; i++)
        while (p->fd[i] >= 0 && recv(p->fd[i], buf, sizeof(buf), MSG_DONTWAIT) > 0) {}
}

/* ---- the plugin sends ---- */

static int listen_on(uint32_t addr_be, uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = addr_be };
    socklen_t len = sizeof(sa);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 16) ||
        getsockname(fd, (struct sockaddr *)&sa, &len)) {
        close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

int speer_open(struct plugin *pl, struct speer *p, int npaths, double timeout_s)
{
    memset(p, 0, sizeof(*p));
    struct hview h = { .magic = W_MAGIC, .npaths = (uint16_t)npaths, .chunk_kb = 0, .token = rnd64() };
    for (int i = 0; i < W_MAX_PATHS; i++) p->lfd[i] = p->fd[i] = -1;
    for (int i = 0; i < npaths; i++) {
        h.addr[i] = htonl(0x7f000001u + (uint32_t)(i % 2));
        p->lfd[i] = listen_on(h.addr[i], &h.port[i]);
        if (p->lfd[i] < 0) return -1;
    }
    handle_put(p->handle, &h);
    p->npaths = npaths;
    double end = mono_s() + timeout_s;
    while (!p->sc) {
        if (pl->net->connect(pl->ctx, 0, p->handle, &p->sc, NULL) != ncclSuccess) return -1;
        for (int i = 0; i < npaths; i++) {
            if (p->fd[i] < 0) {
                p->fd[i] = accept4(p->lfd[i], NULL, NULL, SOCK_CLOEXEC);
                if (p->fd[i] < 0) continue;
                uint8_t b[W_FRAME];
                size_t have = 0;
                double hend = mono_s() + 2.0;
                while (have < W_FRAME && mono_s() < hend) {
                    pl->net->connect(pl->ctx, 0, p->handle, &p->sc, NULL);
                    ssize_t n = recv(p->fd[i], b + have, W_FRAME - have, MSG_DONTWAIT);
                    if (n > 0) have += (size_t)n;
                    if (n == 0) break;
                }
                if (have < W_FRAME) return -1;
                struct wframe f;
                wire_unpack(b, &f);
                if (f.magic != W_MAGIC || f.type != W_HELLO || f.path != i || f.seq != h.token) return -1;
                p->gen[i] = f.gen;
                p->conn_id = f.off;
                p->chunk = (f.aux >> 8) * 1024u;
                struct wframe a = { .magic = W_MAGIC, .type = W_HELLO_ACK, .path = (uint8_t)i, .gen = f.gen };
                if (speer_frame(p, i, &a) != 0) return -1;
            }
        }
        if (!p->sc && mono_s() > end) return -1;
    }
    return 0;
}

void speer_close(struct plugin *pl, struct speer *p)
{
    if (p->sc) pl->net->closeSend(p->sc);
    for (int i = 0; i < W_MAX_PATHS; i++) {
        if (p->fd[i] >= 0) close(p->fd[i]);
        if (p->lfd[i] >= 0) close(p->lfd[i]);
    }
    memset(p, 0, sizeof(*p));
}

int speer_frame(struct speer *p, int path, const struct wframe *f)
{
    uint8_t b[W_FRAME];
    wire_pack(b, f);
    return write_all(p->fd[path], b, sizeof(b), 2.0);
}
