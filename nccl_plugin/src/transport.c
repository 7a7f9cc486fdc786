/* The multipath transport. A connection has one TCP socket per path (local NIC i to the
 * peer's NIC i). Messages carry per-connection sequence numbers and are cut into chunks
 * that any healthy path may carry; the receiver places each chunk at its offset, drops
 * chunks it already has, and acknowledges the contiguous prefix of complete messages. A
 * send is done only once acknowledged. When a path dies (socket error, TCP_USER_TIMEOUT on
 * unacknowledged bytes, its interface going down, or the peer reporting it), every
 * unacknowledged message that used it is replayed on the surviving paths. NCCL sees an
 * error only when no path has been up for FLEET_NET_DEAD_GRACE_MS. The sending side
 * reconnects dead paths once their interface has been up for the hold-down (fail-back). */
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

#define COUNT(field, v) __atomic_add_fetch(&fleet_ctr.field, (uint64_t)(v), __ATOMIC_RELAXED)
#define CTRLQ 16
#define BITMAP_INLINE 4   /* 4 x 64 chunks inline; larger messages allocate */

enum { P_DEAD = 0, P_CONNECTING, P_HELLO_WAIT, P_UP, P_CLOSED };
enum { ROLE_SEND = 1, ROLE_RECV = 2 };

struct conn;

struct req {
    int used, complete;
    struct conn *c;
    uint64_t seq;
    char *data;
    size_t size;          /* send: message size; recv: buffer size */
    size_t got_size;      /* recv: message size from the sender */
    uint32_t nchunks, next_chunk, got_chunks;
    uint32_t pathmask;    /* send: paths that carried a chunk since the last replay */
    int writers;          /* send: paths in the middle of writing one of its chunks */
    uint64_t inline_bits[BITMAP_INLINE];
    uint64_t *bits;
};

struct path {
    int state, fd, link, ever_up;
    uint16_t gen;
    uint64_t t_state, last_attempt;
    uint64_t waiting_since;   /* since when the path has bytes out that the peer has not acked */
    /* write side: the frame in flight, then queued control frames */
    uint8_t whdr[FLEET_FRAME];
    char *wpay;
    size_t wlen, wdone;
    struct req *wreq;
    int wbusy;
    uint8_t ctrlq[CTRLQ][FLEET_FRAME];
    int nctrl;
    /* read side */
    uint8_t rhdr[FLEET_FRAME];
    size_t rhave;
    int rstage;           /* 0: header, 1: header parsed but its message not posted, 2: payload */
    char *rdst;
    size_t rleft;
    struct req *rreq;
    uint32_t rchunk;
};

struct conn {
    int role, dev, npaths;
    uint64_t conn_id, token;
    uint32_t chunk;
    struct in_addr raddr[FLEET_MAX_PATHS];
    uint16_t rport[FLEET_MAX_PATHS];
    struct path p[FLEET_MAX_PATHS];
    struct req req[FLEET_MAX_REQS];
    uint64_t next_seq;    /* sequence number of the next post */
    uint64_t cum;         /* send: acknowledged prefix; recv: complete prefix */
    uint64_t ack_sent;
    int ack_force, ack_path;
    uint64_t all_dead_since, created;
    int failed, peer_bye, established;
    unsigned rr;          /* which path the writer serves first this round */
    uint64_t last_stall_check;
    struct fleet_inbox inbox;
    char scratch[65536];
};

struct listen_comm {
    int dev;
    uint64_t token;
    struct fleet_inbox inbox;
};

static uint64_t rand64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) v = fleet_now_ms() ^ ((uint64_t)getpid() << 32);
    return v | 1;
}

static const char *path_if(struct conn *c, int i)
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

static void ctrl_push(struct path *p, int type, int path, uint16_t gen, uint64_t seq)
{
    if (p->nctrl == CTRLQ) return;   /* control frames are idempotent or re-sent on demand */
    struct fleet_frame f = { .magic = FLEET_MAGIC, .type = (uint8_t)type, .path = (uint8_t)path,
                             .gen = gen, .seq = seq };
    fleet_frame_pack(p->ctrlq[p->nctrl++], &f);
}

static int first_up(struct conn *c)
{
    for (int i = 0; i < c->npaths; i++)
        if (c->p[i].state == P_UP) return i;
    return -1;
}

static void path_reset_io(struct path *p)
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

static void path_kill(struct conn *c, int i, const char *reason, int tell_peer)
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

static void path_up(struct conn *c, int i)
{
    struct path *p = &c->p[i];
    p->state = P_UP;
    p->t_state = fleet_now_ms();
    COUNT(paths_up, 1);
    if (p->ever_up) {
        COUNT(failbacks, 1);
        fleet_event("failback", c->conn_id, i, path_if(c, i), "reconnected", 0);
    }
    p->ever_up = 1;
    c->ack_force = 1;
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

static void maybe_reconnect(struct conn *c, int i, uint64_t now)
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

static void connecting_progress(struct conn *c, int i, short revents, uint64_t now)
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

/* ---- frames in ---- */

static int recv_some(struct conn *c, int i, void *buf, size_t len, size_t *got)
{
    ssize_t n = recv(c->p[i].fd, buf, len, MSG_DONTWAIT);
    if (n > 0) { *got = (size_t)n; return 1; }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    if (n == 0 && c->peer_bye) {
        close(c->p[i].fd);
        c->p[i].fd = -1;
        path_reset_io(&c->p[i]);
        c->p[i].state = P_CLOSED;
        return -1;
    }
    path_kill(c, i, n == 0 ? "eof" : strerror(errno), 1);
    return -1;
}

static void recv_complete(struct conn *c, struct req *r, int path)
{
    r->complete = 1;
    COUNT(bytes_received, r->got_size);
    while (c->cum + 1 < c->next_seq) {
        struct req *n = &c->req[(c->cum + 1) % FLEET_MAX_REQS];
        if (!n->used || !n->complete || n->seq != c->cum + 1) break;
        c->cum++;
    }
    c->ack_path = path;
}

static int chunk_set(struct req *r, uint32_t k)
{
    uint64_t *bits = r->bits ? r->bits : r->inline_bits;
    uint64_t m = 1ull << (k % 64);
    if (bits[k / 64] & m) return 0;
    bits[k / 64] |= m;
    return 1;
}

static int chunk_has(struct req *r, uint32_t k)
{
    const uint64_t *bits = r->bits ? r->bits : r->inline_bits;
    return (bits[k / 64] >> (k % 64)) & 1;
}

/* A DATA header: decide where its payload goes. Returns 0 to read on, 1 to pause the path
 * (its message is not posted yet), -1 on a protocol violation (fatal to the connection). */
static int data_header(struct conn *c, int i, const struct fleet_frame *f)
{
    struct path *p = &c->p[i];
    uint64_t chunk = c->chunk;
    size_t want = f->total - f->off < chunk ? (size_t)(f->total - f->off) : (size_t)chunk;
    if (f->total > FLEET_MAX_MSG || f->off % chunk || (f->off >= f->total && f->total) ||
        f->len != (f->total ? want : 0) || f->seq == 0)
        return -1;
    p->rdst = NULL;
    p->rleft = f->len;
    p->rreq = NULL;
    if (f->seq <= c->cum) {             /* a replayed copy of a finished message */
        COUNT(dup_chunks, 1);
        c->ack_force = 1;
        c->ack_path = i;
        return 0;
    }
    if (f->seq >= c->next_seq) return 1;
    struct req *r = &c->req[f->seq % FLEET_MAX_REQS];
    if (!r->used || r->seq != f->seq) return -1;
    if (f->total > r->size) return -2;  /* the posted buffer is too small: NCCL misuse */
    uint32_t nchunks = f->total ? (uint32_t)((f->total + chunk - 1) / chunk) : 1;
    if (r->nchunks == 0) {
        r->nchunks = nchunks;
        r->got_size = f->total;
        if (nchunks > 64 * BITMAP_INLINE) {
            r->bits = calloc((nchunks + 63) / 64, sizeof(uint64_t));
            if (!r->bits) return -1;
        }
    } else if (r->nchunks != nchunks || r->got_size != f->total) {
        return -1;
    }
    uint32_t k = (uint32_t)(f->off / chunk);
    if (r->complete || chunk_has(r, k)) {
        COUNT(dup_chunks, 1);
        return 0;
    }
    p->rreq = r;
    p->rchunk = k;
    p->rdst = r->data + f->off;
    return 0;
}

static void chunk_done(struct conn *c, int i)
{
    struct path *p = &c->p[i];
    struct req *r = p->rreq;
    p->rreq = NULL;
    if (!r || r->complete) return;
    if (!chunk_set(r, p->rchunk)) { COUNT(dup_chunks, 1); return; }
    if (++r->got_chunks == r->nchunks) recv_complete(c, r, i);
}

static void control_frame(struct conn *c, int i, const struct fleet_frame *f)
{
    if (f->type == FR_ACK && c->role == ROLE_SEND) {
        if (f->seq >= c->next_seq) { c->failed = 1; return; }
        for (uint64_t s = c->cum + 1; s <= f->seq; s++) {
            struct req *r = &c->req[s % FLEET_MAX_REQS];
            if (r->used && r->seq == s && !r->complete) {
                r->complete = 1;
                COUNT(bytes_sent, r->size);
            }
        }
        if (f->seq > c->cum) c->cum = f->seq;
    } else if (f->type == FR_PATH_DOWN) {
        if (f->path < c->npaths && c->p[f->path].gen == f->gen && c->p[f->path].state != P_DEAD &&
            c->p[f->path].state != P_CLOSED)
            path_kill(c, f->path, "peer_reported", 0);
    } else if (f->type == FR_BYE) {
        c->peer_bye = 1;
    } else if (f->type == FR_HELLO_ACK && c->p[i].state == P_HELLO_WAIT && f->gen == c->p[i].gen) {
        path_up(c, i);
    }
}

static void read_path(struct conn *c, int i)
{
    struct path *p = &c->p[i];
    for (int rounds = 0; rounds < 64 && p->fd >= 0; rounds++) {
        if (p->rstage == 0) {
            size_t got;
            int rc = recv_some(c, i, p->rhdr + p->rhave, FLEET_FRAME - p->rhave, &got);
            if (rc <= 0) return;
            p->rhave += got;
            if (p->rhave < FLEET_FRAME) continue;
            p->rhave = 0;
            p->rstage = 1;
        }
        struct fleet_frame f;
        if (fleet_frame_unpack(p->rhdr, &f) != 0) { path_kill(c, i, "bad_frame", 1); return; }
        if (p->rstage == 1) {
            if (f.type != FR_DATA) {
                p->rstage = 0;
                control_frame(c, i, &f);
                continue;
            }
            if (c->role != ROLE_RECV) { path_kill(c, i, "bad_frame", 1); return; }
            int rc = data_header(c, i, &f);
            if (rc == 1) return;                  /* wait for the matching irecv */
            if (rc < 0) { c->failed = 1; return; }
            p->rstage = 2;
        }
        while (p->rleft > 0) {
            char *dst = p->rdst ? p->rdst : c->scratch;
            size_t want = p->rdst ? p->rleft : (p->rleft < sizeof(c->scratch) ? p->rleft : sizeof(c->scratch));
            size_t got;
            int rc = recv_some(c, i, dst, want, &got);
            if (rc <= 0) return;
            p->rleft -= got;
            if (p->rdst) p->rdst += got;
        }
        chunk_done(c, i);
        p->rstage = 0;
    }
}

/* ---- frames out ---- */

static int pick_chunk(struct conn *c, int i)
{
    struct path *p = &c->p[i];
    for (uint64_t s = c->cum + 1; s < c->next_seq; s++) {
        struct req *r = &c->req[s % FLEET_MAX_REQS];
        if (!r->used || r->complete || r->next_chunk >= r->nchunks) continue;
        uint32_t k = r->next_chunk++;
        size_t off = (size_t)k * c->chunk;
        size_t len = r->size - off < c->chunk ? r->size - off : c->chunk;
        struct fleet_frame f = { .magic = FLEET_MAGIC, .type = FR_DATA, .path = (uint8_t)i,
                                 .gen = p->gen, .len = (uint32_t)len, .seq = s, .off = off,
                                 .total = r->size };
        fleet_frame_pack(p->whdr, &f);
        p->wpay = r->data + off;
        p->wlen = len;
        p->wdone = 0;
        p->wreq = r;
        p->wbusy = 1;
        r->writers++;
        r->pathmask |= 1u << i;
        return 1;
    }
    return 0;
}

/* One step of a path's writer: load a frame if idle (control first, then the next unsent chunk)
 * and write what the socket takes. Returns 1 when a whole frame went out, so the caller can go
 * round the paths again: chunks are dealt to the paths in turn, which stripes a message. */
static int write_step(struct conn *c, int i)
{
    struct path *p = &c->p[i];
    if (p->fd < 0 || p->state == P_CONNECTING) return 0;
    if (!p->wbusy) {
        if (p->nctrl > 0) {
            memcpy(p->whdr, p->ctrlq[0], FLEET_FRAME);
            memmove(p->ctrlq[0], p->ctrlq[1], (size_t)(p->nctrl - 1) * FLEET_FRAME);
            p->nctrl--;
            p->wpay = NULL;
            p->wlen = 0;
            p->wdone = 0;
            p->wbusy = 1;
        } else if (c->role == ROLE_SEND && p->state == P_UP && !c->failed) {
            if (!pick_chunk(c, i)) return 0;
        } else {
            return 0;
        }
    }
    struct iovec iov[2];
    int n = 0;
    if (p->wdone < FLEET_FRAME)
        iov[n++] = (struct iovec){ p->whdr + p->wdone, FLEET_FRAME - p->wdone };
    size_t pdone = p->wdone > FLEET_FRAME ? p->wdone - FLEET_FRAME : 0;
    if (p->wlen > pdone) iov[n++] = (struct iovec){ p->wpay + pdone, p->wlen - pdone };
    struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
    ssize_t w = sendmsg(p->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) path_kill(c, i, strerror(errno), 1);
        return 0;
    }
    p->wdone += (size_t)w;
    if (p->wdone < FLEET_FRAME + p->wlen) return 0;   /* socket full: this path is done for now */
    if (p->wreq) p->wreq->writers--;
    p->wreq = NULL;
    p->wbusy = 0;
    return 1;
}

static void write_paths(struct conn *c)
{
    int start = (int)(c->rr++ % (unsigned)c->npaths);
    for (int round = 0; round < 256; round++) {
        int any = 0;
        for (int k = 0; k < c->npaths; k++) any |= write_step(c, (start + k) % c->npaths);
        if (!any) return;
    }
}

static void queue_ack(struct conn *c)
{
    if (c->cum <= c->ack_sent && !c->ack_force) return;
    int i = c->ack_path >= 0 && c->ack_path < c->npaths && c->p[c->ack_path].state == P_UP
        ? c->ack_path : first_up(c);
    if (i < 0 || c->p[i].nctrl == CTRLQ) return;
    ctrl_push(&c->p[i], FR_ACK, i, c->p[i].gen, c->cum);
    c->ack_sent = c->cum;
    c->ack_force = 0;
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

static void take_inbox(struct conn *c, uint64_t now)
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
static void check_stalls(struct conn *c, uint64_t now)
{
    if (now - c->last_stall_check < 10) return;
    c->last_stall_check = now;
    for (int i = 0; i < c->npaths; i++) {
        struct path *p = &c->p[i];
        if (p->state != P_UP || p->fd < 0) continue;
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

/* ---- progress ---- */

static void progress(struct conn *c)
{
    fleet_global_poll();
    uint64_t now = fleet_now_ms();
    if (c->role == ROLE_RECV) take_inbox(c, now);
    struct pollfd pfd[FLEET_MAX_PATHS];
    for (int i = 0; i < c->npaths; i++) {
        struct path *p = &c->p[i];
        pfd[i] = (struct pollfd){ .fd = -1 };
        if (p->state == P_UP || p->state == P_HELLO_WAIT) {
            pthread_mutex_lock(&fleet_lock);
            int up = fleet_link_up(p->link, NULL);
            pthread_mutex_unlock(&fleet_lock);
            if (!up) path_kill(c, i, "link_down", 1);
        }
        if (c->role == ROLE_SEND && p->state == P_DEAD) maybe_reconnect(c, i, now);
        if (p->fd >= 0) {
            pfd[i].fd = p->fd;
            pfd[i].events = POLLIN | (p->state == P_CONNECTING ? POLLOUT : 0);
        }
    }
    if (poll(pfd, (nfds_t)c->npaths, 0) < 0) return;
    for (int i = 0; i < c->npaths; i++) {
        struct path *p = &c->p[i];
        if (p->fd < 0) continue;
        if (p->state == P_CONNECTING || p->state == P_HELLO_WAIT) connecting_progress(c, i, pfd[i].revents, now);
        if (p->fd >= 0 && p->state != P_CONNECTING && (pfd[i].revents & (POLLIN | POLLERR | POLLHUP) || p->rstage == 1))
            read_path(c, i);
    }
    if (c->role == ROLE_RECV) queue_ack(c);
    write_paths(c);
    check_stalls(c, now);

    if (first_up(c) >= 0 || !c->established) {
        c->all_dead_since = 0;
    } else if (!c->failed && !c->peer_bye) {
        if (!c->all_dead_since) c->all_dead_since = now;
        if (now - c->all_dead_since >= (uint64_t)fleet_cfg.dead_grace_ms) {
            c->failed = 1;
            COUNT(errors, 1);
            fleet_event("conn_failed", c->conn_id, -1, "", "all_paths_dead", 0);
        }
    }
}

/* ---- the NCCL-facing operations ---- */

static struct conn *conn_new(int role, int dev, int npaths, uint32_t chunk)
{
    struct conn *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->role = role;
    c->dev = dev;
    c->npaths = npaths;
    c->chunk = chunk;
    c->next_seq = 1;
    c->ack_path = -1;
    c->created = fleet_now_ms();
    for (int i = 0; i < FLEET_MAX_PATHS; i++) {
        c->p[i].fd = -1;
        c->p[i].link = fleet_cfg.dev[dev].path[i < fleet_cfg.dev[dev].npaths ? i : 0].link;
    }
    return c;
}

ncclResult_t fleet_listen(int dev, void *handle, void **listen_comm)
{
    *listen_comm = NULL;
    if (dev < 0 || dev >= fleet_cfg.ndevs) return ncclInvalidArgument;
    uint16_t ports[FLEET_MAX_PATHS];
    ncclResult_t rc = fleet_listener_ports(dev, ports);
    if (rc != ncclSuccess) return rc;
    struct listen_comm *l = calloc(1, sizeof(*l));
    if (!l) return ncclSystemError;
    l->dev = dev;
    l->token = rand64();
    struct fleet_handle h = { .magic = FLEET_MAGIC, .npaths = (uint16_t)fleet_cfg.dev[dev].npaths,
                              .chunk_kb = (uint16_t)(fleet_cfg.chunk / 1024u), .token = l->token };
    for (int i = 0; i < h.npaths; i++) {
        h.path[i].addr = fleet_cfg.dev[dev].path[i].addr.s_addr;
        h.path[i].port = ports[i];
    }
    memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
    memcpy(handle, &h, sizeof(h));
    fleet_registry_add(REG_LISTEN, l->token, &l->inbox);
    *listen_comm = l;
    return ncclSuccess;
}

ncclResult_t fleet_connect(int dev, void *handle, void **send_comm)
{
    /* NCCL keeps calling with the same handle until a comm comes back: the pending
     * connection lives in the handle's spare bytes */
    *send_comm = NULL;
    if (dev < 0 || dev >= fleet_cfg.ndevs) return ncclInvalidArgument;
    struct fleet_handle h;
    memcpy(&h, handle, sizeof(h));
    struct conn **stash = (struct conn **)((char *)handle + NCCL_NET_HANDLE_MAXSIZE - sizeof(void *));
    struct conn *c;
    memcpy(&c, stash, sizeof(c));
    if (!c) {
        if (h.magic != FLEET_MAGIC || h.npaths < 1 || h.npaths > FLEET_MAX_PATHS) return ncclInvalidArgument;
        int npaths = h.npaths < fleet_cfg.dev[dev].npaths ? h.npaths : fleet_cfg.dev[dev].npaths;
        c = conn_new(ROLE_SEND, dev, npaths, fleet_cfg.chunk);
        if (!c) return ncclSystemError;
        c->token = h.token;
        c->conn_id = rand64();
        for (int i = 0; i < npaths; i++) {
            c->raddr[i].s_addr = h.path[i].addr;
            c->rport[i] = h.path[i].port;
        }
        memcpy(stash, &c, sizeof(c));
    }
    progress(c);
    /* done once every path is up or has failed at least once, with one of them up */
    int up = 0, settled = 1;
    for (int i = 0; i < c->npaths; i++) {
        if (c->p[i].state == P_UP) up++;
        else if (!(c->p[i].state == P_DEAD && c->p[i].last_attempt)) settled = 0;
    }
    if (up && settled) {
        memset(stash, 0, sizeof(c));
        c->established = 1;
        COUNT(connections, 1);
        fleet_event("connected", c->conn_id, -1, "", "", (uint64_t)up);
        *send_comm = c;
        return ncclSuccess;
    }
    if (fleet_now_ms() - c->created > 30000u) {
        FLEET_WARN("NET/fleet: connect on %s: no path came up within 30 s", fleet_cfg.dev[dev].name);
        memset(stash, 0, sizeof(c));
        fleet_close_send(c);
        return ncclSystemError;
    }
    return ncclSuccess;
}

ncclResult_t fleet_accept(void *listen_comm, void **recv_comm)
{
    struct listen_comm *l = listen_comm;
    *recv_comm = NULL;
    fleet_global_poll();
    struct fleet_inbox_item first;
    pthread_mutex_lock(&fleet_lock);
    if (l->inbox.n == 0) {
        pthread_mutex_unlock(&fleet_lock);
        return ncclSuccess;
    }
    first = l->inbox.item[0];
    int npaths = first.npaths < fleet_cfg.dev[l->dev].npaths ? first.npaths : fleet_cfg.dev[l->dev].npaths;
    struct conn *c = conn_new(ROLE_RECV, l->dev, npaths, first.chunk);
    if (!c) {
        pthread_mutex_unlock(&fleet_lock);
        return ncclSystemError;
    }
    c->conn_id = first.conn_id;
    /* move every socket of this connection to it; others stay for the next accept */
    int keep = 0;
    for (int k = 0; k < l->inbox.n; k++) {
        if (l->inbox.item[k].conn_id == c->conn_id) c->inbox.item[c->inbox.n++] = l->inbox.item[k];
        else l->inbox.item[keep++] = l->inbox.item[k];
    }
    l->inbox.n = keep;
    pthread_mutex_unlock(&fleet_lock);
    fleet_registry_add(REG_RECV, c->conn_id, &c->inbox);
    c->established = 1;
    COUNT(connections, 1);
    progress(c);
    *recv_comm = c;
    return ncclSuccess;
}

static ncclResult_t conn_error(struct conn *c)
{
    if (c->failed) return ncclSystemError;
    return ncclSuccess;
}

ncclResult_t fleet_isend(void *send_comm, void *data, size_t size, void **request)
{
    struct conn *c = send_comm;
    *request = NULL;
    if (size > FLEET_MAX_MSG) return ncclInvalidArgument;
    progress(c);
    if (c->failed) return ncclSystemError;
    struct req *r = &c->req[c->next_seq % FLEET_MAX_REQS];
    if (r->used) return ncclSuccess;   /* all request slots busy: NCCL retries */
    memset(r, 0, sizeof(*r));
    r->used = 1;
    r->c = c;
    r->seq = c->next_seq++;
    r->data = data;
    r->size = size;
    r->nchunks = size ? (uint32_t)((size + c->chunk - 1) / c->chunk) : 1;
    progress(c);
    *request = r;
    return conn_error(c);
}

ncclResult_t fleet_irecv(void *recv_comm, int n, void **data, const size_t *sizes, void **request)
{
    struct conn *c = recv_comm;
    *request = NULL;
    if (n != 1) return ncclInternalError;   /* maxRecvs is 1: no grouped receives */
    progress(c);
    if (c->failed) return ncclSystemError;
    struct req *r = &c->req[c->next_seq % FLEET_MAX_REQS];
    if (r->used) return ncclSuccess;
    memset(r, 0, sizeof(*r));
    r->used = 1;
    r->c = c;
    r->seq = c->next_seq++;
    r->data = data[0];
    r->size = sizes[0];
    progress(c);
    *request = r;
    return conn_error(c);
}

ncclResult_t fleet_test(void *request, int *done, int *sizes)
{
    struct req *r = request;
    struct conn *c = r->c;
    *done = 0;
    progress(c);
    if (r->complete && r->writers == 0) {
        *done = 1;
        if (sizes) *sizes = (int)(c->role == ROLE_SEND ? r->size : r->got_size);
        free(r->bits);
        r->bits = NULL;
        r->used = 0;
        return ncclSuccess;
    }
    if (c->failed) {
        FLEET_WARN("NET/fleet: connection %016llx failed: every path is down",
                   (unsigned long long)c->conn_id);
        return ncclSystemError;
    }
    if (c->peer_bye && first_up(c) < 0) return ncclRemoteError;
    return ncclSuccess;
}

static void conn_free(struct conn *c)
{
    for (int i = 0; i < c->npaths; i++) {
        struct path *p = &c->p[i];
        if (p->fd < 0) continue;
        if (p->state == P_UP && !p->wbusy) {   /* best effort: tell the peer this was no failure */
            uint8_t bye[FLEET_FRAME];
            struct fleet_frame f = { .magic = FLEET_MAGIC, .type = FR_BYE, .path = (uint8_t)i, .gen = p->gen };
            fleet_frame_pack(bye, &f);
            if (send(p->fd, bye, sizeof(bye), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) { /* peer gone */ }
        }
        close(p->fd);
    }
    for (int k = 0; k < FLEET_MAX_REQS; k++) free(c->req[k].bits);
    free(c);
    pthread_mutex_lock(&fleet_lock);
    fleet_counters_flush(fleet_now_ms(), 1);   /* the last figures of a closing connection */
    pthread_mutex_unlock(&fleet_lock);
}

ncclResult_t fleet_close_send(void *comm)
{
    if (comm) conn_free(comm);
    return ncclSuccess;
}

ncclResult_t fleet_close_recv(void *comm)
{
    struct conn *c = comm;
    if (!c) return ncclSuccess;
    fleet_registry_del(&c->inbox);
    conn_free(c);
    return ncclSuccess;
}

ncclResult_t fleet_close_listen(void *comm)
{
    struct listen_comm *l = comm;
    if (!l) return ncclSuccess;
    fleet_registry_del(&l->inbox);
    free(l);
    return ncclSuccess;
}
