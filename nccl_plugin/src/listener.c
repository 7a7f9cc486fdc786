/* Process-wide listening sockets, one per local path address, and the dispatch of accepted
 * sockets: each new socket must present a HELLO frame within FLEET_NET_HELLO_TIMEOUT_MS; its
 * connection id routes it to an established receive connection (a reconnecting path), else its
 * listen token routes it to a listenComm (a new connection). Anything else is closed.
 *
 * Every listening socket has its own FLEET_PENDING slots for sockets that have not said HELLO yet.
 * The backlog is drained on every poll and a new socket's HELLO is read at once (an honest peer
 * sends it as soon as it is connected); when the slots are full the oldest pending socket is
 * closed. So silent connections, however many, only ever push out each other. */
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fleet.h"

#define ACCEPT_PER_POLL 256      /* accepted per listening socket per poll */
#define REFUSED_WARN_MS 10000    /* at most one warning about refused sockets per listener per 10 s */

struct pending { int fd; uint64_t since; size_t have; uint8_t buf[FLEET_FRAME]; };
struct listener {
    int fd;
    uint16_t port;
    int npending;
    struct pending pending[FLEET_PENDING];   /* oldest first */
    uint64_t silent, evicted, bad, last_warn;
};

static struct listener listeners[FLEET_MAX_DEVS][FLEET_MAX_PATHS];
static uint64_t last_global_poll;

static int open_listener(const struct fleet_path_cfg *pc, uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = pc->addr, .sin_port = 0 };
    socklen_t len = sizeof(sa);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        FLEET_WARN("NET/fleet: cannot listen on %s: %s", pc->ifname, strerror(errno));
        close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

ncclResult_t fleet_listener_ports(int dev, uint16_t *ports)
{
    ncclResult_t rc = ncclSuccess;
    pthread_mutex_lock(&fleet_lock);
    for (int p = 0; p < fleet_cfg.dev[dev].npaths; p++) {
        struct listener *l = &listeners[dev][p];
        if (l->fd <= 0) {
            l->fd = open_listener(&fleet_cfg.dev[dev].path[p], &l->port);
            if (l->fd < 0) { l->fd = 0; rc = ncclSystemError; break; }
        }
        ports[p] = l->port;
    }
    pthread_mutex_unlock(&fleet_lock);
    return rc;
}

/* A complete HELLO: deliver the socket to its comm's inbox. 0 when delivered, -1 when refused. */
static int dispatch(int fd, const struct fleet_frame *f)
{
    struct fleet_inbox *box = fleet_registry_find(f->off, f->seq);
    int npaths = (int)(f->aux & 0xff);
    uint32_t chunk_kb = f->aux >> 8;
    if (!box || box->n == FLEET_INBOX || f->path >= FLEET_MAX_PATHS || npaths < 1 ||
        npaths > FLEET_MAX_PATHS || chunk_kb < 4 || chunk_kb > 16384)
        return -1;
    box->item[box->n++] = (struct fleet_inbox_item){ fd, f->path, f->gen, npaths, chunk_kb * 1024u, f->off };
    return 0;
}

/* Read what a pending socket sent. 0: keep waiting; 1: done with it (delivered or closed). */
static int pending_step(struct listener *l, struct pending *pd, uint64_t now)
{
    ssize_t n = recv(pd->fd, pd->buf + pd->have, FLEET_FRAME - pd->have, MSG_DONTWAIT);
    if (n > 0) pd->have += (size_t)n;
    if (pd->have == FLEET_FRAME) {
        struct fleet_frame f;
        if (fleet_frame_unpack(pd->buf, &f) == 0 && f.type == FR_HELLO && f.len == 0 && dispatch(pd->fd, &f) == 0)
            return 1;
        l->bad++;
    } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        l->bad++;
    } else if (now - pd->since > (uint64_t)fleet_cfg.hello_timeout_ms) {
        l->silent++;
    } else {
        return 0;
    }
    close(pd->fd);
    return 1;
}

static void listener_poll(int d, int p, uint64_t now)
{
    struct listener *l = &listeners[d][p];
    for (int k = 0; k < l->npending; k++) {
        if (pending_step(l, &l->pending[k], now) == 0) continue;
        memmove(&l->pending[k], &l->pending[k + 1], (size_t)(l->npending - k - 1) * sizeof(l->pending[0]));
        l->npending--;
        k--;
    }
    for (int k = 0; k < ACCEPT_PER_POLL; k++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        struct pending pd = { .fd = fd, .since = now };
        if (pending_step(l, &pd, now)) continue;
        if (l->npending == FLEET_PENDING) {   /* full: the oldest goes */
            close(l->pending[0].fd);
            memmove(&l->pending[0], &l->pending[1], (size_t)(FLEET_PENDING - 1) * sizeof(l->pending[0]));
            l->npending--;
            l->evicted++;
        }
        l->pending[l->npending++] = pd;
    }
    if ((l->silent || l->evicted || l->bad) && now - l->last_warn >= REFUSED_WARN_MS) {
        FLEET_WARN("NET/fleet: %s: closed %llu connections without a HELLO within %d ms, %llu as the oldest of "
                   "%d pending, %llu with a bad or unknown HELLO", fleet_cfg.dev[d].path[p].ifname,
                   (unsigned long long)l->silent, fleet_cfg.hello_timeout_ms, (unsigned long long)l->evicted,
                   FLEET_PENDING, (unsigned long long)l->bad);
        l->silent = l->evicted = l->bad = 0;
        l->last_warn = now;
    }
}

void fleet_listener_poll(uint64_t now)
{
    for (int d = 0; d < fleet_cfg.ndevs; d++)
        for (int p = 0; p < fleet_cfg.dev[d].npaths; p++)
            if (listeners[d][p].fd > 0) listener_poll(d, p, now);
}

void fleet_global_poll(void)
{
    uint64_t now = fleet_now_ms();
    pthread_mutex_lock(&fleet_lock);
    /* at most once per millisecond: the hot test() loop must not pay for it every call */
    if (now != last_global_poll) {
        last_global_poll = now;
        fleet_link_poll(now);
        fleet_listener_poll(now);
        fleet_counters_flush(now, 0);
    }
    pthread_mutex_unlock(&fleet_lock);
}
