/* The life of a connection's paths. A connection has one TCP socket per path (local NIC i to the
 * peer's NIC i). Messages carry per-connection sequence numbers and are cut into chunks
 * that any healthy path may carry; the receiver places each chunk at its offset, drops
 * chunks it already has, and acknowledges the contiguous prefix of complete messages. A
 * send is done only once acknowledged. When a path dies (socket error, TCP_USER_TIMEOUT on
 * unacknowledged bytes, its interface going down, or the peer reporting it), every
 * unacknowledged message that used it is replayed on the surviving paths. NCCL sees an
 * error only when no path has been up for FLEET_NET_DEAD_GRACE_MS. The sending side
 * reconnects dead paths once their interface has been up for the hold-down (fail-back).
 * Below frames.c (which kills and raises paths) and progress.c (which drives both). */
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include "fleet.h"
#include "paths.h"

#define HEARTBEAT_MS 50

uint64_t fleet_rand64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) v = fleet_now_ms() ^ ((uint64_t)getpid() << 32);
    return v | 1;
}

const char *path_if(struct conn *c, int i)
{
    return fleet_cfg.dev[c->dev].path[i].ifname;
}

static void sock_tune(int fd, const char *ifname)
{
    int one = 1, tmo = fleet_cfg.user_timeout_ms;
    int idle = 1, intvl = 1, cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* unacknowledged bytes older than this kill the socket: the path's ack timeout */
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &tmo, sizeof(tmo));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    if (ifname && strcmp(ifname, "lo") != 0)   /* keep path i on NIC i whatever the routes say */
        setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ifname, (socklen_t)strlen(ifname));
}

void ctrl_push(struct path *p, int type, int path, uint16_t gen, uint64_t seq)
{
    if (p->nctrl == CTRLQ) return;   /* control frames are idempotent or re-sent on demand */
    struct fleet_frame f = { .magic = FLEET_MAGIC, .type = (uint8_t)type, .path = (uint8_t)path,
                             .gen = gen, .seq = seq };
    fleet_frame_pack(p->ctrlq[p->nctrl++], &f);
}

int first_up(struct conn *c)
{
    for (int i = 0; i < c->npaths; i++)
        if (c->p[i].state == P_UP) return i;
    return -1;
}

void path_reset_io(struct path *p)
{
    if (p->wreq) p->wreq->writers--;
    p->wreq = NULL;
    p->wbusy = 0;
    p->nctrl = 0;
    p->rhave = 0;
    p->rstage = 0;
    p->rreq = NULL;
}

/* Send side: every unacknowledged message that put bytes on a lost path is sent again from
 * its first chunk; chunks that arrive twice are dropped by the receiver. */
static void replay(struct conn *c, int dead)
{
    uint64_t msgs = 0, bytes = 0;
    for (uint64_t s = c->cum + 1; s < c->next_seq; s++) {
        struct req *r = &c->req[s % FLEET_MAX_REQS];
        if (!r->used || r->complete || !(r->pathmask & (1u << dead))) continue;
        size_t handed = (size_t)r->next_chunk * c->chunk;
        bytes += handed < r->size ? handed : r->size;
        msgs++;
        r->next_chunk = 0;
        r->pathmask = 0;
        for (int i = 0; i < c->npaths; i++)
            if (c->p[i].wreq == r) r->pathmask |= 1u << i;
    }
    if (msgs) {
        COUNT(replayed_msgs, msgs);
        COUNT(replayed_bytes, bytes);
        fleet_event("replay", c->conn_id, dead, path_if(c, dead), "path_down", bytes);
    }
}

void path_kill(struct conn *c, int i, const char *reason, int tell_peer)
{
    struct path *p = &c->p[i];
    int was_up = p->state == P_UP;
    if (p->fd >= 0) close(p->fd);
    p->fd = -1;
    path_reset_io(p);
    p->state = P_DEAD;
    p->t_state = p->last_attempt = fleet_now_ms();
    if (!was_up) {
        if (c->role == ROLE_SEND) COUNT(reconnect_failures, 1);
        return;
    }
    COUNT(path_down, 1);
    fleet_event("path_down", c->conn_id, i, path_if(c, i), reason, 0);
    if (c->role == ROLE_SEND) replay(c, i);
    else c->ack_force = 1;   /* the ack may have been lost with the path */
    int other = first_up(c);
    if (tell_peer && other >= 0) ctrl_push(&c->p[other], FR_PATH_DOWN, i, p->gen, 0);
}

void path_up(struct conn *c, int i)
{
    struct path *p = &c->p[i];
    p->state = P_UP;
    p->t_state = fleet_now_ms();
    p->waiting_since = 0;
    COUNT(paths_up, 1);
    if (p->ever_up) {
        COUNT(failbacks, 1);
        fleet_event("failback", c->conn_id, i, path_if(c, i), "reconnected", 0);
    }
    p->ever_up = 1;
    c->ack_force = 1;
}

/* The connection is lost for good: NCCL gets an error from the next call on it. */
void conn_fail(struct conn *c, const char *why)
{
    if (c->failed) return;
    c->failed = 1;
    c->fail_why = why;
    COUNT(errors, 1);
    fleet_event("conn_failed", c->conn_id, -1, "", why, 0);
}

/* ---- send side: connecting paths ---- */

static void start_connect(struct conn *c, int i, uint64_t now)
{
    struct path *p = &c->p[i];
    const struct fleet_path_cfg *pc = &fleet_cfg.dev[c->dev].path[i];
    p->last_attempt = now;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    sock_tune(fd, pc->ifname);
    struct sockaddr_in local = { .sin_family = AF_INET, .sin_addr = pc->addr };
    struct sockaddr_in remote = { .sin_family = AF_INET, .sin_addr = c->raddr[i],
                                  .sin_port = htons(c->rport[i]) };
    if (bind(fd, (struct sockaddr *)&local, sizeof(local)) != 0 ||
        (connect(fd, (struct sockaddr *)&remote, sizeof(remote)) != 0 && errno != EINPROGRESS)) {
        close(fd);
        COUNT(reconnect_failures, 1);
        return;
    }
    p->fd = fd;
    p->gen++;
    p->state = P_CONNECTING;
    p->t_state = now;
}

void path_maybe_reconnect(struct conn *c, int i, uint64_t now)
{
    struct path *p = &c->p[i];
    uint64_t changed = 0;
    pthread_mutex_lock(&fleet_lock);
    int up = fleet_link_up(p->link, &changed);
    pthread_mutex_unlock(&fleet_lock);
    uint64_t hold = (uint64_t)fleet_cfg.holddown_ms;
    if (!up || now - changed < hold) return;
    if (p->ever_up && now - p->last_attempt < hold) return;
    if (!p->ever_up && p->last_attempt && now - p->last_attempt < 100) return;
    start_connect(c, i, now);
}

void path_connecting_progress(struct conn *c, int i, short revents, uint64_t now)
{
    struct path *p = &c->p[i];
    if (p->state == P_CONNECTING && (revents & (POLLOUT | POLLERR | POLLHUP))) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) { path_kill(c, i, "connect", 0); return; }
        struct fleet_frame f = { .magic = FLEET_MAGIC, .type = FR_HELLO, .path = (uint8_t)i,
                                 .gen = p->gen, .aux = (uint32_t)c->npaths | ((c->chunk / 1024u) << 8),
                                 .seq = c->token, .off = c->conn_id };
        fleet_frame_pack(p->ctrlq[0], &f);
        p->nctrl = 1;
        p->state = P_HELLO_WAIT;
        p->t_state = now;
    }
    if ((p->state == P_CONNECTING || p->state == P_HELLO_WAIT) &&
        now - p->t_state > (uint64_t)fleet_cfg.connect_timeout_ms)
        path_kill(c, i, "connect_timeout", 0);
}

/* ---- receive side: adopting paths ---- */

static void adopt(struct conn *c, const struct fleet_inbox_item *it, uint64_t now)
{
    if (it->path >= c->npaths || it->conn_id != c->conn_id || it->chunk != c->chunk) {
        close(it->fd);
        return;
    }
    struct path *p = &c->p[it->path];
    if (p->ever_up) {   /* a returning path must have been up for the hold-down here too */
        uint64_t changed = 0;
        pthread_mutex_lock(&fleet_lock);
        int up = fleet_link_up(p->link, &changed);
        pthread_mutex_unlock(&fleet_lock);
        if (!up || now - changed < (uint64_t)fleet_cfg.holddown_ms) {
            close(it->fd);
            return;
        }
    }
    if (p->state != P_DEAD && p->state != P_CLOSED) {   /* the sender gave up on the old socket */
        close(p->fd);
        path_reset_io(p);
        p->state = P_DEAD;
    }
    p->fd = it->fd;
    p->gen = it->gen;
    sock_tune(p->fd, NULL);
    ctrl_push(p, FR_HELLO_ACK, it->path, p->gen, 0);
    path_up(c, it->path);
}

void paths_take_inbox(struct conn *c, uint64_t now)
{
    struct fleet_inbox box;
    pthread_mutex_lock(&fleet_lock);
    box = c->inbox;
    c->inbox.n = 0;
    pthread_mutex_unlock(&fleet_lock);
    for (int k = 0; k < box.n; k++) adopt(c, &box.item[k], now);
}

/* The per-path acknowledgement timeout. A path that has bytes out (or is probing a zero window)
 * and has had no acknowledgement from the peer for FLEET_NET_ACK_TIMEOUT_MS is dead: a black hole
 * raises no link event and TCP_USER_TIMEOUT only acts at the next retransmission timer. */
void paths_check_stalls(struct conn *c, uint64_t now)
{
    if (now - c->last_stall_check < 10) return;
    c->last_stall_check = now;
    for (int i = 0; i < c->npaths; i++) {
        struct path *p = &c->p[i];
        if (p->state != P_UP || p->fd < 0) continue;
        /* a path we have not written to lately gets a heartbeat: then each side has bytes out on
         * every path regularly, so one of them notices a path that went silent, even while the
         * other cannot send (a sender facing a zero window sends nothing until its probe timer) */
        if (now - p->last_tx >= HEARTBEAT_MS && !p->wbusy && p->nctrl == 0)
            ctrl_push(p, FR_HEARTBEAT, i, p->gen, 0);
        struct tcp_info ti;
        socklen_t len = sizeof(ti);
        if (getsockopt(p->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) continue;
        if (ti.tcpi_unacked == 0 && ti.tcpi_probes == 0) { p->waiting_since = 0; continue; }
        if (!p->waiting_since) p->waiting_since = now;
        uint64_t last_ack = now - ti.tcpi_last_ack_recv;
        uint64_t since = last_ack > p->waiting_since ? last_ack : p->waiting_since;
        if (now - since >= (uint64_t)fleet_cfg.ack_timeout_ms) path_kill(c, i, "ack_timeout", 1);
    }
}
