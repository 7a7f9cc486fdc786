/* Wire fuzzer of libnccl-net-fleet.so: a hostile peer over real TCP sockets (tests/peer.c) against
 * the real library (dlopened; `make fuzz` builds it with ASan and UBSan), with a seeded PRNG so a
 * failure replays, and a model of what the peer sent to check properties, not just "no crash".
 *
 *   fleet_fuzz --lib PATH [--seconds S | --iterations N] [--seed N] [--mode recv|send|hello|handle]
 *              [--status FILE]                    FILE: the current iteration and how to replay it
 *   fleet_fuzz --lib PATH --mode M --replay SEED  one iteration, as printed by a failure
 *
 * Each iteration is one of:
 *   recv   the plugin receives: DATA frames with honest and hostile offsets, lengths, totals,
 *          sequence numbers and chunk indexes, chunks split across paths and finished late (the
 *          late chunk of a completed message), control frames (ACK, HEARTBEAT, PATH_DOWN, HELLO,
 *          HELLO_ACK, BYE) with hostile paths and generations, malformed frames, raw bytes, and
 *          paths closed under it. Properties: test() reports a message complete only when every
 *          chunk of it was sent, with the size and bytes sent, within the posted buffer, nothing
 *          written past the message or into a buffer after test() returned it; a malformed frame
 *          closes its path or fails the connection.
 *   send   the plugin sends to a hostile receiver: honest and lying ACKs, PATH_DOWN, HELLO_ACK,
 *          DATA (which a sender must refuse), bytes, closed paths (replay). Properties: every frame
 *          the plugin writes is well formed and carries the posted bytes; a send completes only
 *          once an ACK covering it was sent; a malformed frame closes its path or fails the
 *          connection.
 *   hello  raw connections to the listening sockets with honest, hostile, partial and silent
 *          HELLOs: accept() returns a comm only for an honest HELLO with the listen token (and
 *          does for one).
 *   handle connect() on random and structured handles (magic, path count, addresses, ports, spare
 *          bytes): refused or pending, never a comm, never a crash.
 * Exit 0: no violation; 1: a property violated (the iteration's seed and mode on stderr); 2: setup.
 * A sanitizer report aborts the run; the death callback prints the seed of the iteration. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include "peer.h"

#if defined(__has_include)
#if __has_include(<sanitizer/common_interface_defs.h>)
#include <sanitizer/common_interface_defs.h>
#define HAVE_SANITIZER 1
#endif
#endif

static struct plugin pl;
static const char *lib;
static uint64_t rng, iter_seed, iter_no;
static const char *iter_mode = "";
static int isolated;   /* in a network namespace of our own: any address is safe to connect to */
static long handle_conns;
static int hostility;   /* per iteration: percent of hostile fields and frames (0: only honest frames, split and interleaved) */
/* what the run did, for its last line: a fuzzer that checks nothing must show it */
static struct { long recv_done, recv_failed, malformed_checked, late_chunks, send_done, send_failed, frames_read,
                accepted, refused_handles; } did;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t r64(void) { return splitmix(&rng); }
static uint32_t rn(uint32_t n) { return n ? (uint32_t)(r64() % n) : 0; }
static int chance(int pct) { return (int)rn(100) < pct; }

static int status_fd = -1;   /* --status FILE: where the run is, rewritten every iteration */

static void where(char *buf, size_t len)
{
    snprintf(buf, len, "fuzz: iteration %llu, mode %s, seed %llu; replay: fleet_fuzz --lib %s --mode %s --replay %llu\n",
             (unsigned long long)iter_no, iter_mode, (unsigned long long)iter_seed, lib, iter_mode,
             (unsigned long long)iter_seed);
}

static void report_where(void)
{
    char buf[512];
    where(buf, sizeof(buf));
    fputs(buf, stderr);
}

/* a sanitizer may end the process without calling back (UBSan's runtime is not ASan's): the
 * status file keeps the seed of the iteration in hand */
static void status_update(void)
{
    char buf[512];
    if (status_fd < 0) return;
    where(buf, sizeof(buf));
    size_t n = strlen(buf);
    memset(buf + n, ' ', sizeof(buf) - n);
    buf[sizeof(buf) - 1] = '\n';
    if (pwrite(status_fd, buf, sizeof(buf), 0) < 0) status_fd = -1;
}

#define VIOL(...) do { fprintf(stderr, "VIOLATION: " __VA_ARGS__); fputc('\n', stderr); report_where(); exit(1); } while (0)
#define SETUP(...) do { fprintf(stderr, "fuzz setup: " __VA_ARGS__); fputc('\n', stderr); report_where(); exit(2); } while (0)

static uint8_t pat(uint64_t seq, uint64_t off)
{
    uint64_t x = seq * 0x9e3779b97f4a7c15ull + off * 0xc2b2ae3d27d4eb4full;
    return (uint8_t)(x >> 56 ^ off);
}

/* ---- what the peer writes to one path: queued, flushed without blocking ---- */

struct opath {
    int fd, dead, desync, may_pause;
    uint8_t *out;
    size_t olen, osent, ocap;
    /* a DATA frame whose payload is only partly queued */
    size_t owed;
    uint64_t owe_seq, owe_off, owe_total, owe_start;   /* owe_start: the chunk's offset */
};

static void q_bytes(struct opath *o, const void *b, size_t n)
{
    if (o->olen + n > o->ocap) {
        size_t cap = (o->olen + n) * 2 + 4096;
        uint8_t *m = realloc(o->out, cap);
        if (!m) SETUP("out of memory");
        o->out = m;
        o->ocap = cap;
    }
    memcpy(o->out + o->olen, b, n);
    o->olen += n;
}

static void q_pattern(struct opath *o, uint64_t seq, uint64_t off, size_t n)
{
    uint8_t tmp[4096];
    while (n) {
        size_t k = n < sizeof(tmp) ? n : sizeof(tmp);
        for (size_t i = 0; i < k; i++) tmp[i] = pat(seq, off + i);
        q_bytes(o, tmp, k);
        off += k;
        n -= k;
    }
}

static void q_frame(struct opath *o, const struct wframe *f)
{
    uint8_t b[W_FRAME];
    wire_pack(b, f);
    q_bytes(o, b, sizeof(b));
}

static void flush(struct opath *o)
{
    while (!o->dead && o->osent < o->olen) {
        ssize_t n = send(o->fd, o->out + o->osent, o->olen - o->osent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) { o->osent += (size_t)n; continue; }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        o->dead = 1;   /* the plugin closed it */
    }
    if (o->osent == o->olen) o->osent = o->olen = 0;
}

/* read and drop what the plugin wrote; 1 when the plugin has closed the socket */
static int drained_closed(struct opath *o)
{
    char buf[8192];
    for (;;) {
        ssize_t n = recv(o->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) continue;
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return 1;
        return 0;
    }
}

static struct wframe hostile_control(int type, int npaths)
{
    struct wframe f = { .magic = W_MAGIC, .type = (uint8_t)type };
    f.path = (uint8_t)(chance(70) ? rn((uint32_t)npaths + 2) : rn(256));
    f.gen = (uint16_t)(chance(60) ? 1 : rn(65536));
    f.seq = chance(50) ? rn(40) : r64();
    f.off = chance(50) ? 0 : r64();
    f.aux = chance(50) ? 0 : (uint32_t)r64();
    return f;
}

/* A frame that every receiver must refuse: 0 bad magic, 1 unknown type, 2 control with a length. */
static struct wframe malformed(int npaths)
{
    struct wframe f = hostile_control(W_HEARTBEAT, npaths);
    switch (rn(3)) {
    case 0: f.magic = (uint32_t)r64() | 1; if (f.magic == W_MAGIC) f.magic ^= 2; break;
    case 1: f.type = (uint8_t)(chance(50) ? 0 : 8 + rn(248)); break;
    default: f.type = (uint8_t)(2 + rn(6)); f.len = 1 + rn(1u << 20); break;
    }
    return f;
}

/* ======================= the plugin receives ======================= */

#define MAXM 40
#define MAXCLAIM 3
struct claim { uint64_t total; uint64_t full; };   /* full: chunks (< 64) queued whole with this total */
struct rmsg {
    uint64_t total;        /* the honest size */
    size_t cap;            /* the posted buffer */
    int posted, done, freed;
    void *req;
    uint8_t *buf;
    int nclaims;
    struct claim claim[MAXCLAIM];
};

struct rstate {
    struct rpeer p;
    uint32_t chunk;
    struct opath o[W_MAX_PATHS];
    struct rmsg m[MAXM + 4];   /* by sequence number, 1-based */
    int posted, tested, failed;
};

static uint32_t nchunks_of(uint64_t total, uint32_t chunk)
{
    return total ? (uint32_t)((total + chunk - 1) / chunk) : 1;
}

static struct claim *claim_of(struct rmsg *m, uint64_t total)
{
    for (int i = 0; i < m->nclaims; i++)
        if (m->claim[i].total == total) return &m->claim[i];
    if (m->nclaims == MAXCLAIM) return NULL;
    m->claim[m->nclaims] = (struct claim){ .total = total };
    return &m->claim[m->nclaims++];
}

static void mark_full(struct rstate *st, uint64_t seq, uint64_t total, uint64_t off)
{
    if (seq < 1 || seq > MAXM + 3 || off % st->chunk) return;
    struct claim *c = claim_of(&st->m[seq], total);
    uint64_t k = off / st->chunk;
    if (c && k < 64) c->full |= 1ull << k;
}

static void r_post(struct rstate *st)
{
    if (st->posted >= MAXM || st->failed) return;
    struct rmsg *m = &st->m[st->posted + 1];
    m->buf = malloc(m->cap ? m->cap : 1);
    if (!m->buf) SETUP("out of memory");
    memset(m->buf, 0xab, m->cap);
    void *data[1] = { m->buf }, *mh = NULL;
    size_t sizes[1] = { m->cap };
    int tags[1] = { 0 };
    ncclResult_t rc = pl.net->irecv(st->p.rc, 1, data, sizes, tags, &mh, NULL, &m->req);
    if (rc != ncclSuccess) { st->failed = 1; free(m->buf); m->buf = NULL; return; }
    if (!m->req) { free(m->buf); m->buf = NULL; return; }   /* every slot busy: later */
    m->posted = 1;
    st->posted++;
}

static void r_check_done(struct rstate *st, uint64_t s, int size)
{
    struct rmsg *m = &st->m[s];
    if (size < 0 || (size_t)size > m->cap)
        VIOL("message %llu reported complete with %d bytes into a %zu-byte buffer", (unsigned long long)s, size, m->cap);
    uint32_t n = nchunks_of((uint64_t)size, st->chunk);
    struct claim *c = NULL;
    for (int i = 0; i < m->nclaims; i++)
        if (m->claim[i].total == (uint64_t)size) c = &m->claim[i];
    for (uint32_t k = 0; k < n; k++)
        if (!c || k >= 64 || !(c->full >> k & 1))
            VIOL("message %llu reported complete (%d bytes) but its chunk %u of that size was never sent whole",
                 (unsigned long long)s, size, k);
    for (int i = 0; i < size; i++)
        if (m->buf[i] != pat(s, (uint64_t)i))
            VIOL("message %llu: byte %d is not what was sent", (unsigned long long)s, i);
    for (size_t i = (size_t)size; i < m->cap; i++)
        if (m->buf[i] != 0xab)
            VIOL("message %llu (%d bytes): byte %zu of the buffer, past the message, was written",
                 (unsigned long long)s, size, i);
    m->done = 1;
    did.recv_done++;
    if (chance(50)) { free(m->buf); m->buf = NULL; m->freed = 1; }   /* ASan sees any later write */
    else memset(m->buf, 0xee, m->cap);                               /* the caller's again */
}

/* test() the oldest request like NCCL's proxy, `rounds` times */
static void r_pump(struct rstate *st, int rounds)
{
    for (int r = 0; r < rounds && !st->failed; r++) {
        for (int i = 0; i < st->p.npaths; i++) flush(&st->o[i]);
        if (st->tested >= st->posted) {
            r_post(st);
            if (st->tested >= st->posted) return;   /* nothing to drive progress with */
        }
        uint64_t s = (uint64_t)st->tested + 1;
        int done = 0, size = -1;
        if (pl.net->test(st->m[s].req, &done, &size) != ncclSuccess) { st->failed = 1; return; }
        if (done) { r_check_done(st, s, size); st->tested++; }
    }
}

static void r_data(struct rstate *st, int i, int partial)
{
    struct opath *o = &st->o[i];
    uint64_t s = chance(85) ? 1 + rn((uint32_t)st->posted + 2) : (chance(50) ? 0 : 1 + rn(MAXM + 3));
    if (s > MAXM + 3) s = MAXM + 3;
    if (!hostility && (s == 0 || s > (uint64_t)st->posted + 2)) s = 1 + rn((uint32_t)st->posted + 1);
    uint64_t total = s ? st->m[s].total : rn(70000);
    if (chance(hostility)) total = chance(50) ? rn(70000) : (chance(50) ? (1ull << 30) + rn(100) : r64());
    uint32_t n = nchunks_of(total, st->chunk);
    uint64_t k = !chance(hostility) ? rn(n) : n + rn(3);
    uint64_t off = k * st->chunk;
    uint64_t len = total > off ? (total - off < st->chunk ? total - off : st->chunk) : 0;
    struct wframe f = { .magic = W_MAGIC, .type = W_DATA, .path = (uint8_t)i, .gen = 1, .len = (uint32_t)len,
                        .seq = s, .off = off, .total = total };
    int honest_geometry = s != 0 && total <= (1u << 30) && (total ? off < total : off == 0);
    if (chance(hostility)) { f.off += 1 + rn(st->chunk - 1); honest_geometry = 0; }
    if (chance(hostility)) { f.len = chance(50) ? f.len + 1 : (uint32_t)r64(); honest_geometry = honest_geometry && f.len == len; }
    if (chance(10)) { f.path = (uint8_t)rn(256); f.gen = (uint16_t)r64(); }   /* ignored on DATA */
    if (chance(hostility / 2)) f.seq = st->posted + 33 + rn(1000);           /* past the window */
    if (f.seq > (uint64_t)st->posted || f.seq > MAXM + 3) o->may_pause = 1;
    q_frame(o, &f);
    if (!honest_geometry) {
        /* a frame every receiver refuses: its payload (if any) is never read */
        o->desync = 1;
        return;
    }
    size_t body = f.len;
    if (partial && body > 1) {
        size_t first = rn((uint32_t)body);
        q_pattern(o, s, off, first);
        o->owed = body - first;
        o->owe_seq = s;
        o->owe_off = off + first;
        o->owe_total = total;
        o->owe_start = off;
        return;
    }
    q_pattern(o, s, off, body);
    mark_full(st, s, total, off);
}

static void r_finish(struct rstate *st, int i)
{
    struct opath *o = &st->o[i];
    if (!o->owed) return;
    q_pattern(o, o->owe_seq, o->owe_off, o->owed);
    mark_full(st, o->owe_seq, o->owe_total, o->owe_start);
    o->owed = 0;
}

/* a whole message, honest: its chunks shuffled over the usable paths, some sent twice */
static void r_whole(struct rstate *st)
{
    int usable[W_MAX_PATHS], nu = 0;
    for (int i = 0; i < st->p.npaths; i++)
        if (!st->o[i].dead && !st->o[i].desync && !st->o[i].owed) usable[nu++] = i;
    if (!nu) return;
    uint64_t s = (uint64_t)st->tested + 1 + rn((uint32_t)(st->posted - st->tested) + 1);
    if (s > MAXM + 3) return;
    struct rmsg *m = &st->m[s];
    uint32_t n = nchunks_of(m->total, st->chunk), order[64];
    if (n > 64) return;
    for (uint32_t c = 0; c < n; c++) order[c] = c;
    for (uint32_t c = n; c > 1; c--) { uint32_t j = rn(c), t = order[c - 1]; order[c - 1] = order[j]; order[j] = t; }
    for (uint32_t c = 0; c < n; c++) {
        for (int copies = chance(10) ? 2 : 1; copies > 0; copies--) {
            int i = usable[rn((uint32_t)nu)];
            uint64_t off = (uint64_t)order[c] * st->chunk;
            uint64_t len = m->total > off ? (m->total - off < st->chunk ? m->total - off : st->chunk) : 0;
            struct wframe f = { .magic = W_MAGIC, .type = W_DATA, .path = (uint8_t)i, .gen = 1, .len = (uint32_t)len,
                                .seq = s, .off = off, .total = m->total };
                if (s > (uint64_t)st->posted) st->o[i].may_pause = 1;
            q_frame(&st->o[i], &f);
            q_pattern(&st->o[i], s, off, len);
            mark_full(st, s, m->total, off);
        }
        if (chance(20)) r_pump(st, 1);
    }
}

/* a frame every receiver must refuse: its path closes or the connection fails */
static void r_malformed(struct rstate *st, int i)
{
    struct opath *o = &st->o[i];
    struct wframe f = malformed(st->p.npaths);
    int check = !o->desync && !o->may_pause && !o->owed && !o->dead;
    q_frame(o, &f);
    o->desync = 1;
    if (!check) return;
    for (int r = 0; r < 400 && !st->failed; r++) {
        r_pump(st, 1);
        if (o->dead || drained_closed(o)) { did.malformed_checked++; return; }
        if (st->tested >= st->posted && st->posted >= MAXM) return;   /* nothing left to drive it */
        if (r > 100) usleep(100);
    }
    if (!st->failed) VIOL("a malformed frame (type %u, magic %08x, len %u) on path %d neither closed the path "
                          "nor failed the connection", f.type, f.magic, f.len, i);
    did.malformed_checked++;
}

static void iter_recv(void)
{
    static struct rstate st;
    memset(&st, 0, sizeof(st));
    hostility = (int[]){ 0, 0, 2, 5, 10, 20 }[rn(6)];
    uint32_t chunk_kb = (uint32_t[]){ 4, 4, 8, 16, 64 }[rn(5)];
    int npaths = chance(80) ? 2 : 1;
    if (rpeer_open(&pl, &st.p, npaths, chunk_kb, 5.0) != 0) SETUP("no receive connection");
    st.chunk = chunk_kb * 1024;
    for (int i = 0; i < st.p.npaths; i++) st.o[i].fd = st.p.fd[i];
    for (int s = 1; s <= MAXM + 3; s++) {
        st.m[s].total = chance(10) ? 0 : chance(70) ? rn(4 * st.chunk + 1) : rn(65536);
        st.m[s].cap = !chance(hostility) ? st.m[s].total + (chance(50) ? 0 : rn(4096)) : rn(65536);
    }
    int want = 1 + (int)rn(8);
    for (int k = 0; k < want; k++) r_post(&st);
    int steps = 20 + (int)rn(120);
    for (int step = 0; step < steps && !st.failed; step++) {
        int i = (int)rn((uint32_t)st.p.npaths);
        struct opath *o = &st.o[i];
        uint32_t a = rn(100);
        if (o->dead) { r_pump(&st, 2); continue; }
        if (o->owed) {                       /* this path is mid-chunk: finish it, now or later */
            if (a < 40) r_finish(&st, i);
            else r_pump(&st, 1 + (int)rn(4));
            continue;
        }
        if (o->desync) {                     /* its frame boundaries are lost: bytes only */
            if (a < 30) { uint8_t junk[256]; for (size_t b = 0; b < sizeof(junk); b++) junk[b] = (uint8_t)r64(); q_bytes(o, junk, 1 + rn(sizeof(junk))); }
            r_pump(&st, 2);
            continue;
        }
        if (a < 25) r_whole(&st);
        else if (a < 45) r_data(&st, i, chance(25));
        else if (a < 55) r_post(&st);
        else if (a < 65) r_pump(&st, 1 + (int)rn(20));
        else if (a < 75) {
            static const int types[] = { W_ACK, W_HEARTBEAT, W_PATH_DOWN, W_HELLO, W_HELLO_ACK, W_BYE };
            struct wframe f = hostile_control(types[rn(6)], st.p.npaths);
            if (f.type == W_PATH_DOWN && f.path < st.p.npaths && f.gen == 1 && chance(50)) f.gen = 2;   /* mostly stale */
            q_frame(o, &f);
        } else if (a < 80) {
            if (chance(hostility * 5)) r_malformed(&st, i);
        } else if (a < 84) {                 /* bytes */
            if (!chance(hostility * 5)) continue;
            uint8_t junk[512];
            for (size_t b = 0; b < sizeof(junk); b++) junk[b] = (uint8_t)r64();
            q_bytes(o, junk, 1 + rn(sizeof(junk)));
            o->desync = 1;
        } else if (a < 86 && st.p.npaths > 1) {   /* the path dies under it */
            flush(o);
            shutdown(o->fd, chance(50) ? SHUT_WR : SHUT_RDWR);
            o->dead = 1;
        } else if (a < 96 && st.p.npaths > 1) {
            /* defect 3's pattern: a chunk of the oldest message begun on this path, the message
             * completed on the other path, the chunk finished later */
            uint64_t s = (uint64_t)st.tested + 1;
            int j = (i + 1) % st.p.npaths;
            if (s > (uint64_t)st.posted || st.o[j].dead || st.o[j].desync || st.o[j].owed) continue;
            struct rmsg *m = &st.m[s];
            uint32_t n = nchunks_of(m->total, st.chunk);
            uint64_t k = rn(n), off = k * st.chunk;
            uint64_t len = m->total > off ? (m->total - off < st.chunk ? m->total - off : st.chunk) : 0;
            if (len < 2) continue;
            struct wframe f = { .magic = W_MAGIC, .type = W_DATA, .path = (uint8_t)i, .gen = 1, .len = (uint32_t)len,
                                .seq = s, .off = off, .total = m->total };
            q_frame(o, &f);
            size_t first = 1 + rn((uint32_t)len - 1);
            q_pattern(o, s, off, first);
            o->owed = len - first;
            o->owe_seq = s;
            o->owe_off = off + first;
            o->owe_total = m->total;
            o->owe_start = off;
            r_pump(&st, 3);
            did.late_chunks++;
            for (uint32_t c = 0; c < n; c++) {
                uint64_t co = (uint64_t)c * st.chunk;
                uint64_t cl = m->total > co ? (m->total - co < st.chunk ? m->total - co : st.chunk) : 0;
                struct wframe g = { .magic = W_MAGIC, .type = W_DATA, .path = (uint8_t)j, .gen = 1,
                                    .len = (uint32_t)cl, .seq = s, .off = co, .total = m->total };
                q_frame(&st.o[j], &g);
                q_pattern(&st.o[j], s, co, cl);
                mark_full(&st, s, m->total, co);
            }
            r_pump(&st, 30);
            for (int extra = (int)rn(3); extra > 0; extra--) r_post(&st);
        } else {
            r_pump(&st, 1);
        }
    }
    for (int i = 0; i < st.p.npaths; i++) if (st.o[i].owed && chance(70)) r_finish(&st, i);
    r_pump(&st, 50);
    did.recv_failed += st.failed;
    rpeer_close(&pl, &st.p);   /* closes the plugin's sockets: nothing can write a buffer now */
    for (int s = 1; s <= MAXM; s++) {
        struct rmsg *m = &st.m[s];
        if (m->done && !m->freed)
            for (size_t b = 0; b < m->cap; b++)
                if (m->buf[b] != 0xee)
                    VIOL("message %d: byte %zu of its buffer was written after test() returned it", s, b);
        free(m->buf);
    }
    for (int i = 0; i < W_MAX_PATHS; i++) free(st.o[i].out);
}

/* ======================= the plugin sends ======================= */

#define MAXS 24
struct smsg { uint8_t *data; size_t size; void *req; int posted, done; uint64_t got; };   /* got: chunks read whole */
struct ipath { uint8_t hdr[W_FRAME]; size_t have; struct wframe f; size_t left, at; };

struct sstate {
    struct speer p;
    struct opath o[W_MAX_PATHS];
    struct ipath in[W_MAX_PATHS];
    struct smsg m[MAXS + 1];
    int posted, tested, failed;
    uint64_t max_ack;   /* the largest ACK the peer sent */
};

/* Parse what the plugin wrote on path i; every frame must be well formed and carry the posted bytes. */
static void s_read(struct sstate *st, int i)
{
    struct ipath *in = &st->in[i];
    struct opath *o = &st->o[i];
    uint8_t buf[8192];
    for (;;) {
        ssize_t n = recv(o->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n <= 0) {
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) o->dead = 1;
            return;
        }
        for (ssize_t b = 0; b < n;) {
            if (in->left == 0 && in->have < W_FRAME) {
                size_t k = W_FRAME - in->have < (size_t)(n - b) ? W_FRAME - in->have : (size_t)(n - b);
                memcpy(in->hdr + in->have, buf + b, k);
                in->have += k;
                b += (ssize_t)k;
                if (in->have < W_FRAME) continue;
                wire_unpack(in->hdr, &in->f);
                in->have = 0;
                const struct wframe *f = &in->f;
                if (f->magic != W_MAGIC || f->type < W_DATA || f->type > W_HEARTBEAT || f->type == W_HELLO_ACK ||
                    (f->type != W_DATA && f->len))
                    VIOL("the plugin wrote a malformed frame on path %d (magic %08x type %u len %u)", i, f->magic,
                         f->type, f->len);
                did.frames_read++;
                if (f->type != W_DATA) continue;
                if (f->seq < 1 || f->seq > (uint64_t)st->posted)
                    VIOL("the plugin sent DATA for message %llu, %d posted", (unsigned long long)f->seq, st->posted);
                struct smsg *m = &st->m[f->seq];
                uint64_t want = f->total > f->off ? (f->total - f->off < st->p.chunk ? f->total - f->off : st->p.chunk) : 0;
                if (f->total != m->size || f->off % st->p.chunk || (m->size ? f->off >= m->size : f->off != 0) ||
                    f->len != want)
                    VIOL("the plugin sent DATA with a wrong geometry for message %llu (%zu bytes): off %llu len %u total %llu",
                         (unsigned long long)f->seq, m->size, (unsigned long long)f->off, f->len,
                         (unsigned long long)f->total);
                in->left = f->len;
                in->at = 0;
                if (in->left == 0) m->got |= 1;
                continue;
            }
            size_t k = in->left < (size_t)(n - b) ? in->left : (size_t)(n - b);
            struct smsg *m = &st->m[in->f.seq];
            if (memcmp(buf + b, m->data + in->f.off + in->at, k) != 0)
                VIOL("the plugin sent bytes of message %llu that were not posted", (unsigned long long)in->f.seq);
            in->at += k;
            in->left -= k;
            b += (ssize_t)k;
            if (in->left == 0 && in->f.off / st->p.chunk < 64) m->got |= 1ull << (in->f.off / st->p.chunk);
        }
    }
}

static int s_whole(const struct sstate *st, int s)
{
    uint32_t n = nchunks_of(st->m[s].size, st->p.chunk);
    return n <= 64 && st->m[s].got == (n == 64 ? ~0ull : (1ull << n) - 1);
}

static void s_pump(struct sstate *st, int rounds)
{
    for (int r = 0; r < rounds && !st->failed; r++) {
        for (int i = 0; i < st->p.npaths; i++) { flush(&st->o[i]); if (!st->o[i].dead) s_read(st, i); }
        if (st->tested >= st->posted) return;
        int s = st->tested + 1, done = 0, size = -1;
        if (pl.net->test(st->m[s].req, &done, &size) != ncclSuccess) { st->failed = 1; return; }
        if (!done) continue;
        if ((uint64_t)s > st->max_ack) VIOL("send %d reported done, but the peer acknowledged only up to %llu", s,
                                            (unsigned long long)st->max_ack);
        if (size != (int)st->m[s].size) VIOL("send %d reported %d bytes, posted %zu", s, size, st->m[s].size);
        st->m[s].done = 1;
        st->tested++;
        did.send_done++;
    }
}

static void s_post(struct sstate *st)
{
    if (st->posted >= MAXS || st->failed) return;
    struct smsg *m = &st->m[st->posted + 1];
    ncclResult_t rc = pl.net->isend(st->p.sc, m->data, m->size, 0, NULL, NULL, &m->req);
    if (rc != ncclSuccess) { st->failed = 1; return; }
    if (!m->req) return;
    m->posted = 1;
    st->posted++;
}

static void s_ack(struct sstate *st, int i, uint64_t seq)
{
    struct wframe f = { .magic = W_MAGIC, .type = W_ACK, .path = (uint8_t)i, .gen = st->p.gen[i], .seq = seq };
    q_frame(&st->o[i], &f);
    flush(&st->o[i]);
    if (!st->o[i].dead && seq > st->max_ack) st->max_ack = seq;   /* lying or not, it covers them now */
    if (st->o[i].dead) return;
    /* an ACK for a message never sent must fail the connection; checked while a posted send is
     * left to drive progress with (a new isend would make the ACK name a real message) */
    if (seq > (uint64_t)st->posted && st->tested < st->posted) {
        for (int r = 0; r < 400 && !st->failed && !st->o[i].dead && st->tested < st->posted; r++) {
            s_pump(st, 1);
            if (r > 100) usleep(100);
        }
        if (!st->failed && !st->o[i].dead && st->tested < st->posted)
            VIOL("an ACK for message %llu (%d sent) did not fail the connection", (unsigned long long)seq, st->posted);
    }
}

static void iter_send(void)
{
    static struct sstate st;
    memset(&st, 0, sizeof(st));
    hostility = (int[]){ 0, 0, 5, 10, 20 }[rn(5)];
    if (speer_open(&pl, &st.p, 2, 5.0) != 0) SETUP("no send connection");
    for (int i = 0; i < st.p.npaths; i++) st.o[i].fd = st.p.fd[i];
    for (int s = 1; s <= MAXS; s++) {
        st.m[s].size = chance(10) ? 0 : chance(60) ? rn(4 * st.p.chunk + 1) : rn(65536);
        st.m[s].data = malloc(st.m[s].size ? st.m[s].size : 1);
        for (size_t b = 0; b < st.m[s].size; b++) st.m[s].data[b] = pat((uint64_t)s, b);
    }
    int steps = 20 + (int)rn(100);
    for (int step = 0; step < steps && !st.failed; step++) {
        int i = (int)rn((uint32_t)st.p.npaths);
        struct opath *o = &st.o[i];
        uint32_t a = rn(100);
        if (a < 25) s_post(&st);
        else if (a < 45) s_pump(&st, 1 + (int)rn(20));
        else if (a < 65 && !o->dead && !o->desync) {   /* an honest cumulative ACK */
            uint64_t cum = 0;
            while ((int)cum < st.posted && s_whole(&st, (int)cum + 1)) cum++;
            if (cum) s_ack(&st, i, cum);
        } else if (a < 70 && !o->dead && !o->desync) {
            if (!chance(hostility * 5)) continue;
            s_ack(&st, i, chance(70) ? rn((uint32_t)st.posted + 1) : (uint64_t)st.posted + 1 + rn(5));
        } else if (a < 80 && !o->dead && !o->desync) {
            static const int types[] = { W_HEARTBEAT, W_PATH_DOWN, W_HELLO, W_HELLO_ACK, W_BYE };
            struct wframe f = hostile_control(types[rn(5)], st.p.npaths);
            if (f.type == W_PATH_DOWN && chance(50)) f.gen = (uint16_t)(st.p.gen[f.path % st.p.npaths] + 1);
            q_frame(o, &f);
        } else if (a < 86 && !o->dead && !o->desync) {   /* malformed, or DATA, which a sender refuses */
            if (!chance(hostility * 5)) continue;
            struct wframe f = malformed(st.p.npaths);
            if (chance(30)) f = (struct wframe){ .magic = W_MAGIC, .type = W_DATA, .path = (uint8_t)i, .seq = 1 };
            q_frame(o, &f);
            o->desync = 1;
            for (int r = 0; r < 400 && !st.failed && !o->dead; r++) {
                s_pump(&st, 1);
                if (drained_closed(o)) o->dead = 1;
                if (st.tested >= st.posted) { s_post(&st); if (st.tested >= st.posted) break; }
                if (r > 100) usleep(100);
            }
            if (!o->dead && !st.failed && st.tested < st.posted)
                VIOL("a malformed frame (type %u) on path %d neither closed the path nor failed the connection", f.type, i);
        } else if (a < 90 && !o->dead) {
            if (!chance(hostility * 5)) continue;
            uint8_t junk[300];
            for (size_t b = 0; b < sizeof(junk); b++) junk[b] = (uint8_t)r64();
            q_bytes(o, junk, 1 + rn(sizeof(junk)));
            o->desync = 1;
        } else if (a < 93 && !o->dead) {   /* the path dies: the plugin replays on the other */
            shutdown(o->fd, SHUT_RDWR);
            o->dead = 1;
        } else {
            s_pump(&st, 2);
        }
    }
    s_pump(&st, 30);
    did.send_failed += st.failed;
    speer_close(&pl, &st.p);
    for (int s = 1; s <= MAXS; s++) free(st.m[s].data);
    for (int i = 0; i < W_MAX_PATHS; i++) free(st.o[i].out);
}

/* ======================= HELLO on the listening sockets ======================= */

static void iter_hello(void)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *rc = NULL;
    if (pl.net->listen(pl.ctx, 0, handle, &lc) != ncclSuccess) SETUP("listen");
    struct hview h;
    handle_get(handle, &h);
    int fds[8], n = 1 + (int)rn(8), honest = 0;
    uint64_t conn_id = r64() | 1;
    for (int k = 0; k < n; k++) {
        int path = (int)rn(h.npaths);
        fds[k] = tcp_connect(h.addr[path], h.port[path], 0);
        if (fds[k] < 0) SETUP("connect to the listener");
        struct wframe f = { .magic = W_MAGIC, .type = W_HELLO, .path = (uint8_t)path, .gen = 1,
                            .aux = 2u | (4u << 8), .seq = h.token, .off = conn_id };
        int ok = 1;
        switch (rn(12)) {
        case 0: f.seq ^= 1 + r64() % 0xffff; ok = 0; break;                           /* wrong token */
        case 1: f.path = (uint8_t)(8 + rn(248)); ok = 0; break;
        case 2: f.aux = (f.aux & ~0xffu) | (chance(50) ? 0 : 9 + rn(247)); ok = 0; break;   /* path count */
        case 3: f.aux = (f.aux & 0xffu) | ((chance(50) ? rn(4) : 16385 + rn(100000)) << 8); ok = 0; break;
        case 4: f.len = 1 + rn(1000); ok = 0; break;
        case 5: f.type = (uint8_t)(chance(50) ? W_DATA : W_HELLO_ACK); ok = 0; break;
        case 6: f.magic ^= 1u << rn(32); ok = 0; break;
        default: break;
        }
        uint8_t b[W_FRAME];
        wire_pack(b, &f);
        size_t len = W_FRAME;
        if (chance(12)) { len = rn(W_FRAME); ok = 0; }                 /* partial, then silence */
        if (chance(8)) { for (size_t i = 0; i < W_FRAME; i++) b[i] = (uint8_t)r64(); ok = 0; }
        if (len && write_all(fds[k], b, len, 1.0) != 0) ok = 0;
        honest |= ok;
    }
    double end = mono_s() + (honest ? 3.0 : 0.05);
    while (!rc && mono_s() < end) {
        if (pl.net->accept(lc, &rc, NULL) != ncclSuccess) VIOL("accept failed on hostile HELLOs");
        if (!rc) usleep(500);
    }
    if (rc && !honest) VIOL("accept returned a connection no honest HELLO asked for");
    if (!rc && honest) VIOL("an honest HELLO was not accepted within 3 s");
    if (rc) { did.accepted++; pl.net->closeRecv(rc); }
    pl.net->closeListen(lc);
    for (int k = 0; k < n; k++) close(fds[k]);
}

/* ======================= handles ======================= */

static void iter_handle(void)
{
    static char handle[NCCL_NET_HANDLE_MAXSIZE];
    struct hview h;
    for (size_t i = 0; i < sizeof(handle); i++) handle[i] = (char)r64();
    int structured = chance(70);
    if (structured) {
        handle_get(handle, &h);
        h.magic = chance(90) ? W_MAGIC : (uint32_t)r64();
        h.npaths = (uint16_t)(chance(80) ? 1 + rn(2) : rn(300));
        for (int i = 0; i < W_MAX_PATHS; i++) {
            if (!isolated || chance(70)) h.addr[i] = htonl(0x7f000000u | (r64() & 0xffffff));
            h.port[i] = (uint16_t)(chance(50) ? 1 + rn(1024) : r64());
        }
        memset(handle, 0, sizeof(handle));
        handle_put(handle, &h);
        if (chance(30)) for (size_t i = 80; i < sizeof(handle); i++) handle[i] = (char)r64();   /* foreign spare bytes */
    } else if (!isolated) {
        handle_get(handle, &h);
        for (int i = 0; i < W_MAX_PATHS; i++) h.addr[i] = htonl(0x7f000000u | (r64() & 0xffffff));
        handle_put(handle, &h);
    }
    handle_get(handle, &h);
    uint64_t spare[6];
    memcpy(spare, handle + 80, sizeof(spare));
    int would_start = h.magic == W_MAGIC && h.npaths >= 1 && h.npaths <= 8 && spare[5] == 0;
    if (would_start && ++handle_conns > 200) return;   /* a pending connect lives until its 30 s end */
    void *sc = NULL;
    int calls = 1 + (int)rn(3);
    for (int k = 0; k < calls; k++) {
        ncclResult_t rc = pl.net->connect(pl.ctx, 0, handle, &sc, NULL);
        if (k == 0 && !would_start && rc == ncclSuccess)
            VIOL("connect accepted a handle it must refuse (magic %08x, %u paths, spare bytes %016llx)", h.magic, h.npaths,
                 (unsigned long long)spare[5]);
        if (rc != ncclSuccess) { did.refused_handles++; break; }
        if (sc) VIOL("connect returned a comm for a handle nobody listens on");
    }
}

/* ======================= the run ======================= */

static void isolate(void)
{
    if (getenv("FLEET_FUZZ_NO_NETNS") || unshare(CLONE_NEWNET) != 0) return;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(fd, SIOCSIFFLAGS, &ifr) == 0) isolated = 1;
    }
    if (fd >= 0) close(fd);
}

static void on_death(void)
{
    fprintf(stderr, "fuzz: a sanitizer stopped the run\n");
    report_where();
}

static const char *const MODES[] = { "recv", "recv", "recv", "send", "send", "hello", "handle" };

static void run_one(uint64_t seed, const char *only)
{
    iter_seed = seed;
    rng = seed;
    iter_mode = MODES[r64() % (sizeof(MODES) / sizeof(MODES[0]))];
    if (only) iter_mode = only;   /* the same stream either way: --mode with --replay replays */
    status_update();
    if (!strcmp(iter_mode, "recv")) iter_recv();
    else if (!strcmp(iter_mode, "send")) iter_send();
    else if (!strcmp(iter_mode, "hello")) iter_hello();
    else iter_handle();
}

int main(int argc, char **argv)
{
    double seconds = 0;
    long iterations = 0;
    uint64_t seed = 1, replay = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "fleet_fuzz: %s needs a value\n", argv[i]); return 2; }
        if (!strcmp(argv[i], "--lib")) lib = v;
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(v);
        else if (!strcmp(argv[i], "--iterations")) iterations = atol(v);
        else if (!strcmp(argv[i], "--seed")) seed = strtoull(v, NULL, 0);
        else if (!strcmp(argv[i], "--replay")) replay = strtoull(v, NULL, 0);
        else if (!strcmp(argv[i], "--mode")) only = v;
        else if (!strcmp(argv[i], "--status")) status_fd = open(v, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        else { fprintf(stderr, "fleet_fuzz: unknown option %s\n", argv[i]); return 2; }
        i++;
    }
    if (!lib || (only && strcmp(only, "recv") && strcmp(only, "send") && strcmp(only, "hello") && strcmp(only, "handle"))) {
        fprintf(stderr, "usage: fleet_fuzz --lib PATH [--seconds S | --iterations N] [--seed N] "
                        "[--mode recv|send|hello|handle] [--status FILE] | --mode M --replay SEED\n");
        return 2;
    }
    if (!seconds && !iterations) iterations = 200;
    isolate();
    setenv("FLEET_NET_IFACES", "127.0.0.1,127.0.0.2", 1);
    setenv("FLEET_NET_CHUNK_KB", "4", 1);
    setenv("FLEET_NET_COUNTERS_DIR", "off", 1);
    unsetenv("FLEET_NET_LOG");
    plugin_quiet = !getenv("PEER_VERBOSE");
#ifdef HAVE_SANITIZER
    __sanitizer_set_death_callback(on_death);
#else
    (void)on_death;
#endif
    if (plugin_open(&pl, lib) != 0) return 2;
    if (replay) {
        iter_no = 0;
        run_one(replay, only);
        printf("fuzz: replayed seed %llu (%s): no violation\n", (unsigned long long)replay, iter_mode);
        return 0;
    }
    uint64_t s = seed;
    double end = mono_s() + seconds;
    long counts[4] = { 0 };
    if (seconds) fprintf(stderr, "fuzz: seed %llu, %.0f s\n", (unsigned long long)seed, seconds);
    else fprintf(stderr, "fuzz: seed %llu, %ld iterations\n", (unsigned long long)seed, iterations);
    for (iter_no = 0; seconds ? mono_s() < end : (long)iter_no < iterations; iter_no++) {
        run_one(splitmix(&s), only);
        counts[!strcmp(iter_mode, "recv") ? 0 : !strcmp(iter_mode, "send") ? 1 : !strcmp(iter_mode, "hello") ? 2 : 3]++;
        plugin_warnings_clear();
    }
    printf("fuzz: seed %llu: %llu iterations (recv %ld, send %ld, hello %ld, handle %ld)%s, no violation\n"
           "fuzz: checked %ld received messages (%ld connections failed by a hostile frame), %ld malformed frames "
           "refused, %ld late chunks; %ld sends acknowledged and %ld frames of the plugin's read (%ld connections "
           "failed); %ld honest HELLOs accepted; %ld handles refused\n",
           (unsigned long long)seed, (unsigned long long)iter_no, counts[0], counts[1], counts[2], counts[3],
           isolated ? " in a network namespace of its own" : "", did.recv_done, did.recv_failed, did.malformed_checked,
           did.late_chunks, did.send_done, did.frames_read, did.send_failed, did.accepted, did.refused_handles);
    return 0;
}
