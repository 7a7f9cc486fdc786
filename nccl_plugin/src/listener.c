/* Process-wide listening sockets, one per local path address, and the dispatch of accepted
 * sockets: each new socket must present a HELLO frame within the connect timeout; its
 * connection id routes it to an established receive connection (a reconnecting path), else
 * its listen token routes it to a listenComm (a new connection). Anything else is closed. */
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fleet.h"

#define MAX_PENDING 64

struct listener { int fd; uint16_t port; };
struct pending { int fd; uint64_t since; size_t have; uint8_t buf[FLEET_FRAME]; };
struct reg { int kind, dev; uint64_t key; struct fleet_inbox *box; };

static struct listener listeners[FLEET_MAX_DEVS][FLEET_MAX_PATHS];
static struct pending pendings[MAX_PENDING];
static int npending;
/* The registry: every listenComm and recvComm of the process, FLEET_MAX_COMMS per device (what
 * getProperties advertises as maxComms); grown as needed. */
static struct reg *regs;
static int nregs, capregs;
static int ndevregs[FLEET_MAX_DEVS];
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

ncclResult_t fleet_registry_add_locked(int kind, uint64_t key, int dev, struct fleet_inbox *box)
{
    if (ndevregs[dev] >= FLEET_MAX_COMMS) {
        FLEET_WARN("NET/fleet: %s: %d comms are open on this device, the most it advertises (maxComms)",
                   fleet_cfg.dev[dev].name, FLEET_MAX_COMMS);
        return ncclSystemError;
    }
    if (nregs == capregs) {
        int cap = capregs ? 2 * capregs : 64;
        struct reg *more = realloc(regs, (size_t)cap * sizeof(*regs));
        if (!more) {
            FLEET_WARN("NET/fleet: %s: out of memory for comm %d", fleet_cfg.dev[dev].name, nregs + 1);
            return ncclSystemError;
        }
        regs = more;
        capregs = cap;
    }
    box->reg = nregs;
    regs[nregs++] = (struct reg){ kind, dev, key, box };
    ndevregs[dev]++;
    return ncclSuccess;
}

ncclResult_t fleet_registry_add(int kind, uint64_t key, int dev, struct fleet_inbox *box)
{
    pthread_mutex_lock(&fleet_lock);
    ncclResult_t rc = fleet_registry_add_locked(kind, key, dev, box);
    pthread_mutex_unlock(&fleet_lock);
    return rc;
}

void fleet_registry_del(struct fleet_inbox *box)
{
    pthread_mutex_lock(&fleet_lock);
    int i = box->reg;
    if (i >= 0 && i < nregs && regs[i].box == box) {
        ndevregs[regs[i].dev]--;
        regs[i] = regs[--nregs];
        regs[i].box->reg = i;
    }
    box->reg = -1;
    for (int k = 0; k < box->n; k++) close(box->item[k].fd);
    box->n = 0;
    pthread_mutex_unlock(&fleet_lock);
}

static void dispatch(int fd, const struct fleet_frame *f)
{
    struct fleet_inbox *box = NULL;
    for (int i = 0; i < nregs && !box; i++)
        if (regs[i].kind == REG_RECV && regs[i].key == f->off) box = regs[i].box;
    for (int i = 0; i < nregs && !box; i++)
        if (regs[i].kind == REG_LISTEN && regs[i].key == f->seq) box = regs[i].box;
    int npaths = (int)(f->aux & 0xff);
    uint32_t chunk_kb = f->aux >> 8;
    if (!box || box->n == FLEET_INBOX || f->path >= FLEET_MAX_PATHS || npaths < 1 ||
        npaths > FLEET_MAX_PATHS || chunk_kb < 4 || chunk_kb > 16384) {
        close(fd);
        return;
    }
    box->item[box->n++] = (struct fleet_inbox_item){ fd, f->path, f->gen, npaths, chunk_kb * 1024u, f->off };
}

void fleet_listener_poll(uint64_t now)
{
    for (int d = 0; d < fleet_cfg.ndevs; d++) {
        for (int p = 0; p < fleet_cfg.dev[d].npaths; p++) {
            int lfd = listeners[d][p].fd;
            if (lfd <= 0) continue;
            while (npending < MAX_PENDING) {
                int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) break;
                pendings[npending++] = (struct pending){ .fd = fd, .since = now };
            }
        }
    }
    for (int i = 0; i < npending; i++) {
        struct pending *pd = &pendings[i];
        ssize_t n = recv(pd->fd, pd->buf + pd->have, FLEET_FRAME - pd->have, MSG_DONTWAIT);
        int drop = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                   now - pd->since > (uint64_t)fleet_cfg.connect_timeout_ms;
        if (n > 0) pd->have += (size_t)n;
        if (!drop && pd->have == FLEET_FRAME) {
            struct fleet_frame f;
            if (fleet_frame_unpack(pd->buf, &f) == 0 && f.type == FR_HELLO && f.len == 0)
                dispatch(pd->fd, &f);
            else
                close(pd->fd);
            pendings[i--] = pendings[--npending];
            continue;
        }
        if (drop) {
            close(pd->fd);
            pendings[i--] = pendings[--npending];
        }
    }
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
