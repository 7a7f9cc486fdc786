/* The wire side of a connection (above paths.c, below progress.c): frames read from each path (DATA placed at its offset in the
 * posted buffer, duplicates dropped; ACK, PATH_DOWN, HELLO_ACK, BYE) and frames written to the
 * paths in turn (control first, then chunks dealt one per path per round: striping). */
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
#include "frames.h"
#include "paths.h"

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

/* A message is complete: no path may go on writing into its buffer, which test() is about to hand
 * back to NCCL. A path in the middle of one of its chunks (a copy the peer also sent on another
 * path) reads the rest of that chunk into scratch and drops it. */
static void recv_complete(struct conn *c, struct req *r, int path)
{
    r->complete = 1;
    COUNT(bytes_received, r->got_size);
    for (int i = 0; i < c->npaths; i++) {
        if (c->p[i].rreq != r) continue;
        c->p[i].rreq = NULL;
        c->p[i].rdst = NULL;
        COUNT(dup_chunks, 1);
    }
    while (c->cum + 1 < c->next_seq) {
        struct req *n = &c->req[(c->cum + 1) % FLEET_MAX_REQS];
        if (!n->used || !n->complete || n->seq != c->cum + 1) break;
        c->cum++;
    }
    c->ack_path = path;
}

/* The chunk bitmap of a request: chunk indexes are bounded by the message's chunk count, which
 * also bounds the bitmap (inline up to 64 * BITMAP_INLINE chunks, allocated beyond). */
static int chunk_set(struct req *r, uint32_t k)
{
    if (k >= r->nchunks) return 0;
    uint64_t *bits = r->bits ? r->bits : r->inline_bits;
    uint64_t m = 1ull << (k % 64);
    if (bits[k / 64] & m) return 0;
    bits[k / 64] |= m;
    return 1;
}

static int chunk_has(const struct req *r, uint32_t k)
{
    if (k >= r->nchunks) return 1;
    const uint64_t *bits = r->bits ? r->bits : r->inline_bits;
    return (bits[k / 64] >> (k % 64)) & 1;
}

/* A DATA header: decide where its payload goes. Returns 0 to read on, 1 to pause the path
 * (its message is not posted yet), -1 on a protocol violation (fatal to the connection, *why says
 * which). */
static int data_header(struct conn *c, int i, const struct fleet_frame *f, const char **why)
{
    struct path *p = &c->p[i];
    uint64_t chunk = c->chunk;
    *why = "bad DATA frame (offset, length or size)";
    if (f->total > FLEET_MAX_MSG || f->off % chunk || (f->total ? f->off >= f->total : f->off != 0) || f->seq == 0)
        return -1;
    size_t want = f->total - f->off < chunk ? (size_t)(f->total - f->off) : (size_t)chunk;
    if (f->len != (f->total ? want : 0)) return -1;
    p->rdst = NULL;
    p->rleft = f->len;
    p->rreq = NULL;
    if (f->seq <= c->cum) {             /* a replayed copy of a finished message */
        COUNT(dup_chunks, 1);
        c->ack_force = 1;
        c->ack_path = i;
        return 0;
    }
    /* the sender reuses a request slot only once its previous message was acknowledged */
    *why = "DATA for a message beyond the request window";
    if (f->seq > c->cum + FLEET_MAX_REQS) return -1;
    if (f->seq >= c->next_seq) return 1;
    struct req *r = &c->req[f->seq % FLEET_MAX_REQS];
    *why = "DATA for a message that is not posted";
    if (!r->used || r->seq != f->seq) return -1;
    *why = "message larger than the posted receive";
    if (f->total > r->size) return -1;
    uint32_t nchunks = f->total ? (uint32_t)((f->total + chunk - 1) / chunk) : 1;
    *why = "DATA frames of one message disagree on its size";
    if (r->nchunks == 0) {
        if (nchunks > 64 * BITMAP_INLINE) {
            r->bits = calloc((nchunks + 63) / 64, sizeof(uint64_t));
            *why = "out of memory for a chunk bitmap";
            if (!r->bits) return -1;
        }
        r->nchunks = nchunks;
        r->got_size = f->total;
    } else if (r->nchunks != nchunks || r->got_size != f->total) {
        return -1;
    }
    uint32_t k = (uint32_t)(f->off / chunk);
    if (r->complete || chunk_has(r, k)) {   /* refused: a copy of what is already there */
        COUNT(dup_chunks, 1);
        return 0;
    }
    p->rreq = r;
    p->rseq = r->seq;
    p->rchunk = k;
    p->rdst = r->data + f->off;
    return 0;
}

static void chunk_done(struct conn *c, int i)
{
    struct path *p = &c->p[i];
    struct req *r = p->rreq;
    p->rreq = NULL;
    p->rdst = NULL;
    if (!r) return;
    if (!r->used || r->seq != p->rseq || r->complete || !chunk_set(r, p->rchunk)) {
        COUNT(dup_chunks, 1);
        return;
    }
    if (++r->got_chunks == r->nchunks) recv_complete(c, r, i);
}

static void control_frame(struct conn *c, int i, const struct fleet_frame *f)
{
    if (f->type == FR_ACK && c->role == ROLE_SEND) {
        if (f->seq >= c->next_seq) { conn_fail(c, "ACK for a message never sent"); return; }
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

void read_path(struct conn *c, int i)
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
            const char *why = NULL;
            int rc = data_header(c, i, &f, &why);
            if (rc == 1) return;                  /* wait for the matching irecv */
            if (rc < 0) {
                conn_fail(c, why);
                path_kill(c, i, "bad_frame", 0);
                return;
            }
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
    p->last_tx = fleet_now_ms();
    return 1;
}

void write_paths(struct conn *c)
{
    int start = (int)(c->rr++ % (unsigned)c->npaths);
    for (int round = 0; round < 256; round++) {
        int any = 0;
        for (int k = 0; k < c->npaths; k++) any |= write_step(c, (start + k) % c->npaths);
        if (!any) return;
    }
}

void queue_ack(struct conn *c)
{
    if (c->cum <= c->ack_sent && !c->ack_force) return;
    int i = c->ack_path >= 0 && c->ack_path < c->npaths && c->p[c->ack_path].state == P_UP
        ? c->ack_path : first_up(c);
    if (i < 0 || c->p[i].nctrl == CTRLQ) return;
    ctrl_push(&c->p[i], FR_ACK, i, c->p[i].gen, c->cum);
    c->ack_sent = c->cum;
    c->ack_force = 0;
}
