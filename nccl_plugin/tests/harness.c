/* Drives libnccl-net-fleet.so the way NCCL's proxy does: dlopen, the versioned plugin table,
 * listen/connect/accept polled until they return a comm, at most --window outstanding
 * requests per connection posted in order, test() polled, every byte verified.
 *
 *   fleet_harness --lib PATH --version 8..12|all --fork [options]     both ends, two processes
 *   fleet_harness --lib PATH --version N --role recv|send --handle-file F [options]
 *   fleet_harness --plain --role recv|send --handle-file F --addr A     plain TCP baseline
 * Options: --messages N, --seconds S (sender: stop after S s), --min-size B, --max-size B,
 *   --window W (<= 8 like NCCL_NET_MAX_REQUESTS of NCCL <= 2.2x), --seed S, --trace FILE
 *   (sender: "idx size post_ns done_ns" per message), --progress FILE (sender: bytes done,
 *   rewritten about every 10 ms), --stop-file F (sender: the message after F appears is the last).
 *   Prints one JSON line; exit 0 ok, 1 bad data, 2 usage/setup,
 *   3 transport error reported by the plugin. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "fleet_net_v8.h"
#include "fleet_net_v9.h"
#include "fleet_net_v10.h"
#include "fleet_net_v11.h"
#include "fleet_net_v12.h"

#define MAX_WINDOW 32

struct opts {
    const char *lib, *role, *handle_file, *trace, *progress, *addr, *stop_file;
    int version, fork_mode, plain, window;
    long messages;
    double seconds;
    size_t min_size, max_size;
    uint64_t seed;
};

/* One calling convention over all versions. */
struct net {
    int version;
    const void *tab;
    void *ctx;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line, const char *fmt, ...)
{
    (void)flags; (void)file; (void)line;
    if (level > NCCL_LOG_WARN && !getenv("HARNESS_VERBOSE")) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[plugin] ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

#define T(v) ((const ncclNet_v##v##_t *)n->tab)
#define CALL(member, ...) \
    (n->version == 8 ? T(8)->member(__VA_ARGS__) : n->version == 9 ? T(9)->member(__VA_ARGS__) : \
     n->version == 10 ? T(10)->member(__VA_ARGS__) : n->version == 11 ? T(11)->member(__VA_ARGS__) : \
     T(12)->member(__VA_ARGS__))

static int net_open(struct net *n, const char *lib, int version)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen %s: %s\n", lib, dlerror()); return -1; }
    char sym[32];
    snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", version);
    n->tab = dlsym(h, sym);
    n->version = version;
    if (!n->tab) { fprintf(stderr, "%s not exported\n", sym); return -1; }
    if (dlsym(h, "fleet_init") || dlsym(h, "fleet_isend")) {
        fprintf(stderr, "internal symbols are exported\n");
        return -1;
    }
    ncclResult_t rc;
    if (version == 8) rc = T(8)->init(logger);
    else if (version == 9) rc = T(9)->init(logger);
    else if (version == 10) rc = T(10)->init(logger, NULL);
    else if (version == 11) rc = T(11)->init(&n->ctx, 1, NULL, logger, NULL);
    else rc = T(12)->init(&n->ctx, 1, NULL, logger, NULL);
    if (rc != ncclSuccess) { fprintf(stderr, "init failed: %d\n", rc); return -1; }
    int ndev = 0;
    CALL(devices, &ndev);
    if (ndev < 1) { fprintf(stderr, "no devices\n"); return -1; }
    char *name = NULL;
    int speed = 0, ptr = 0;
    switch (version) {
    case 8: { ncclNetProperties_v8_t p; if (T(8)->getProperties(0, &p)) return -1; name = p.name; speed = p.speed; ptr = p.ptrSupport; break; }
    case 9: { ncclNetProperties_v9_t p; if (T(9)->getProperties(0, &p)) return -1; name = p.name; speed = p.speed; ptr = p.ptrSupport; break; }
    case 10: { ncclNetProperties_v10_t p; if (T(10)->getProperties(0, &p)) return -1; name = p.name; speed = p.speed; ptr = p.ptrSupport; break; }
    case 11: { ncclNetProperties_v11_t p; if (T(11)->getProperties(0, &p)) return -1; name = p.name; speed = p.speed; ptr = p.ptrSupport; break; }
    default: { ncclNetProperties_v12_t p; if (T(12)->getProperties(0, &p)) return -1; name = p.name; speed = p.speed; ptr = p.ptrSupport;
               if (p.railId != -1 || p.planeId != -1) return -1;
               break; }
    }
    if (!name || ptr != NCCL_PTR_HOST || speed <= 0) { fprintf(stderr, "bad properties\n"); return -1; }
    fprintf(stderr, "harness: v%d device 0 = %s (%d Mbps)\n", version, name, speed);
    return 0;
}

static ncclResult_t net_listen(struct net *n, void *handle, void **lc)
{
    switch (n->version) {
    case 8: return T(8)->listen(0, handle, lc);
    case 9: return T(9)->listen(0, handle, lc);
    case 10: return T(10)->listen(0, handle, lc);
    case 11: return T(11)->listen(n->ctx, 0, handle, lc);
    default: return T(12)->listen(n->ctx, 0, handle, lc);
    }
}

static ncclResult_t net_connect(struct net *n, void *handle, void **sc)
{
    switch (n->version) {
    case 8: return T(8)->connect(0, handle, sc, NULL);
    case 9: return T(9)->connect(0, handle, sc, NULL);
    case 10: { ncclNetCommConfig_v10_t cfg = { -1 }; ncclNetDeviceHandle_v10_t *d = NULL; return T(10)->connect(0, &cfg, handle, sc, &d); }
    case 11: return T(11)->connect(n->ctx, 0, handle, sc, NULL);
    default: return T(12)->connect(n->ctx, 0, handle, sc, NULL);
    }
}

static ncclResult_t net_isend(struct net *n, void *c, void *data, size_t size, void *mh, void **req)
{
    switch (n->version) {
    case 8: return T(8)->isend(c, data, (int)size, 0, mh, req);
    case 9: return T(9)->isend(c, data, size, 0, mh, req);
    case 10: return T(10)->isend(c, data, size, 0, mh, NULL, req);
    case 11: return T(11)->isend(c, data, size, 0, mh, NULL, req);
    default: return T(12)->isend(c, data, size, 0, mh, NULL, req);
    }
}

static ncclResult_t net_irecv(struct net *n, void *c, void *data, size_t size, void *mh, void **req)
{
    int tag = 0;
    void *datas[1] = { data }, *mhs[1] = { mh };
    if (n->version == 8) { int s = (int)size; return T(8)->irecv(c, 1, datas, &s, &tag, mhs, req); }
    size_t s = size;
    switch (n->version) {
    case 9: return T(9)->irecv(c, 1, datas, &s, &tag, mhs, req);
    case 10: return T(10)->irecv(c, 1, datas, &s, &tag, mhs, NULL, req);
    case 11: return T(11)->irecv(c, 1, datas, &s, &tag, mhs, NULL, req);
    default: return T(12)->irecv(c, 1, datas, &s, &tag, mhs, NULL, req);
    }
}

/* ---- data pattern: 16-byte header (index, flags) then a stream seeded by (seed, index) ---- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static void fill(char *buf, size_t size, uint64_t seed, uint64_t idx, int last)
{
    uint64_t hdr[2] = { idx, (uint64_t)last };
    memcpy(buf, hdr, 16);
    uint64_t s = mix(seed ^ (idx * 0x9e3779b97f4a7c15ull));
    size_t i = 16;
    for (; i + 8 <= size; i += 8) { s = mix(s + i); memcpy(buf + i, &s, 8); }
    for (; i < size; i++) buf[i] = (char)mix(s + i);
}

static int verify(const char *buf, size_t size, uint64_t seed, uint64_t idx, char *tmp)
{
    uint64_t hdr[2];
    memcpy(hdr, buf, 16);
    fill(tmp, size, seed, idx, (int)hdr[1]);
    return memcmp(tmp, buf, size) == 0;
}

static size_t msg_size(const struct opts *o, uint64_t idx)
{
    uint64_t r = mix(o->seed * 31 + idx);
    /* log-uniform between min and max: small control-like messages and full NCCL slices */
    double lo = (double)o->min_size, hi = (double)o->max_size;
    double f = (double)(r % 1000000) / 1e6;
    size_t s = (size_t)(lo * __builtin_pow(hi / lo, f));
    return s < o->min_size ? o->min_size : s > o->max_size ? o->max_size : s;
}

/* ---- handle exchange ---- */

static int write_handle(const char *path, const void *h, size_t len)
{
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    for (size_t i = 0; i < len; i++) fprintf(f, "%02x", ((const unsigned char *)h)[i]);
    fprintf(f, "\n");
    if (fclose(f) != 0) return -1;
    return rename(tmp, path);
}

static int read_handle(const char *path, void *h, size_t len, double wait_s)
{
    uint64_t end = now_ns() + (uint64_t)(wait_s * 1e9);
    while (now_ns() < end) {
        FILE *f = fopen(path, "r");
        if (f) {
            unsigned char *b = h;
            size_t i = 0;
            unsigned v;
            while (i < len && fscanf(f, "%2x", &v) == 1) b[i++] = (unsigned char)v;
            fclose(f);
            if (i == len) return 0;
        }
        usleep(10000);
    }
    return -1;
}

/* ---- the two ends ---- */

struct result {
    long messages;
    uint64_t bytes;
    long corrupt, duplicated, lost;
    double seconds;
    int error;
};

static void print_result(const struct opts *o, const char *role, const struct result *r)
{
    printf("{\"role\": \"%s\", \"version\": %d, \"plain\": %s, \"messages\": %ld, \"bytes\": %" PRIu64
           ", \"corrupt\": %ld, \"duplicated\": %ld, \"lost\": %ld, \"seconds\": %.6f, \"gbps\": %.4f, "
           "\"error\": %s}\n",
           role, o->version, o->plain ? "true" : "false", r->messages, r->bytes, r->corrupt,
           r->duplicated, r->lost, r->seconds, r->seconds > 0 ? (double)r->bytes * 8 / r->seconds / 1e9 : 0.0,
           r->error ? "true" : "false");
    fflush(stdout);
}

static void write_progress(const char *path, uint64_t bytes, long msgs)
{
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%" PRIu64 " %ld %" PRIu64 "\n", bytes, msgs, now_ns());
    if (fclose(f) == 0) rename(tmp, path);
}

static int run_send(struct net *n, const struct opts *o, const void *handle_in)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    memcpy(handle, handle_in, sizeof(handle));
    void *sc = NULL;
    struct result r = { 0 };
    uint64_t t_end = now_ns() + 60ull * 1000000000ull;
    while (!sc) {
        if (net_connect(n, handle, &sc) != ncclSuccess || now_ns() > t_end) {
            fprintf(stderr, "harness: connect failed\n");
            r.error = 1;
            print_result(o, "send", &r);
            return 3;
        }
    }
    int w = o->window;
    char *buf[MAX_WINDOW];
    void *mh[MAX_WINDOW], *req[MAX_WINDOW];
    uint64_t idx_of[MAX_WINDOW], post_ns[MAX_WINDOW];
    size_t size_of[MAX_WINDOW];
    for (int i = 0; i < w; i++) {
        buf[i] = malloc(o->max_size);
        if (!buf[i] || CALL(regMr, sc, buf[i], o->max_size, NCCL_PTR_HOST, &mh[i]) != ncclSuccess) return 2;
    }
    FILE *trace = o->trace ? fopen(o->trace, "w") : NULL;
    uint64_t t0 = now_ns(), last_progress = 0;
    uint64_t stop_ns = o->seconds > 0 ? t0 + (uint64_t)(o->seconds * 1e9) : 0;
    long posted = 0, done = 0;
    int head = 0, count = 0, last_posted = 0;
    while (!(last_posted && count == 0)) {
        /* post in order while the window has room */
        while (count < w && !last_posted) {
            int slot = (head + count) % w;
            int last = (o->messages > 0 && posted + 1 >= o->messages) || (stop_ns && now_ns() >= stop_ns) ||
                       (o->stop_file && (posted & 63) == 0 && access(o->stop_file, F_OK) == 0);
            size_t size = msg_size(o, (uint64_t)posted);
            fill(buf[slot], size, o->seed, (uint64_t)posted, last);
            void *rq = NULL;
            if (net_isend(n, sc, buf[slot], size, mh[slot], &rq) != ncclSuccess) { r.error = 1; goto out; }
            if (!rq) break;   /* plugin busy: retry later, same message */
            req[slot] = rq;
            idx_of[slot] = (uint64_t)posted;
            size_of[slot] = size;
            post_ns[slot] = now_ns();
            posted++;
            count++;
            last_posted = last;
        }
        /* test the oldest, like the proxy does */
        if (count > 0) {
            int d = 0, sz = -1;
            if (CALL(test, req[head], &d, &sz) != ncclSuccess) { r.error = 1; goto out; }
            if (d) {
                if ((size_t)sz != size_of[head]) r.corrupt++;
                if (trace) fprintf(trace, "%" PRIu64 " %zu %" PRIu64 " %" PRIu64 "\n", idx_of[head], size_of[head], post_ns[head], now_ns());
                r.bytes += size_of[head];
                done++;
                head = (head + 1) % w;
                count--;
            } else {
                sched_yield();   /* like the proxy thread: poll, but let others run */
            }
        }
        if (o->progress && now_ns() - last_progress > 10000000ull) {
            last_progress = now_ns();
            write_progress(o->progress, r.bytes, done);
        }
    }
out:
    r.seconds = (double)(now_ns() - t0) / 1e9;
    r.messages = done;
    if (o->progress) write_progress(o->progress, r.bytes, done);
    if (trace) fclose(trace);
    print_result(o, "send", &r);
    if (!r.error) {
        /* keep the connection open until the receiver had time to read the last ack path */
        usleep(100000);
        CALL(closeSend, sc);
    }
    return r.error ? 3 : r.corrupt ? 1 : 0;
}

static int run_recv(struct net *n, const struct opts *o, void *lc)
{
    void *rc = NULL;
    struct result r = { 0 };
    uint64_t t_end = now_ns() + 60ull * 1000000000ull;
    while (!rc) {
        if (CALL(accept, lc, &rc, NULL) != ncclSuccess || now_ns() > t_end) {
            fprintf(stderr, "harness: accept failed\n");
            r.error = 1;
            print_result(o, "recv", &r);
            return 3;
        }
    }
    CALL(closeListen, lc);
    int w = o->window;
    char *buf[MAX_WINDOW], *tmp = malloc(o->max_size);
    void *mh[MAX_WINDOW], *req[MAX_WINDOW];
    for (int i = 0; i < w; i++) {
        buf[i] = malloc(o->max_size);
        if (!buf[i] || !tmp || CALL(regMr, rc, buf[i], o->max_size, NCCL_PTR_HOST, &mh[i]) != ncclSuccess) return 2;
    }
    uint64_t t0 = 0, expect = 0;
    int head = 0, count = 0, got_last = 0;
    long posted = 0;
    while (!got_last) {
        while (count < w) {
            int slot = (head + count) % w;
            void *rq = NULL;
            memset(buf[slot], 0xa5, 16);   /* a stale header must not pass for a new one */
            if (net_irecv(n, rc, buf[slot], o->max_size, mh[slot], &rq) != ncclSuccess) { r.error = 1; goto out; }
            if (!rq) break;
            req[slot] = rq;
            posted++;
            count++;
        }
        int d = 0, sz = -1;
        if (CALL(test, req[head], &d, &sz) != ncclSuccess) { r.error = 1; goto out; }
        if (!d) {
            sched_yield();
            continue;
        }
        if (!t0) t0 = now_ns();
        uint64_t hdr[2];
        memcpy(hdr, buf[head], 16);
        size_t want = msg_size(o, expect);
        if (sz < 16 || (size_t)sz != want || hdr[0] != expect) {
            if (sz >= 16 && hdr[0] < expect) r.duplicated++;
            else if (sz >= 16 && hdr[0] > expect && hdr[0] < expect + 1000000) r.lost += (long)(hdr[0] - expect);
            else r.corrupt++;
            fprintf(stderr, "harness: message %" PRIu64 ": got index %" PRIu64 " size %d (want %zu)\n", expect, hdr[0], sz, want);
            if (sz >= 16 && hdr[0] > expect) expect = hdr[0];
        } else if (!verify(buf[head], (size_t)sz, o->seed, expect, tmp)) {
            r.corrupt++;
            fprintf(stderr, "harness: message %" PRIu64 " corrupt\n", expect);
        }
        if (sz >= 16) got_last = hdr[1] == 1;
        r.bytes += (uint64_t)(sz > 0 ? sz : 0);
        r.messages++;
        expect++;
        head = (head + 1) % w;
        count--;
    }
    /* the receives still posted past the last message are left unmatched, as NCCL never does;
     * closing the comm with them outstanding is allowed */
out:
    r.seconds = t0 ? (double)(now_ns() - t0) / 1e9 : 0;
    print_result(o, "recv", &r);
    CALL(closeRecv, rc);
    return r.error ? 3 : (r.corrupt || r.duplicated || r.lost) ? 1 : 0;
}

/* ---- plain TCP baseline: the same messages over one blocking TCP stream ---- */

static int full_io(int fd, char *b, size_t len, int wr)
{
    while (len) {
        ssize_t k = wr ? send(fd, b, len, MSG_NOSIGNAL) : recv(fd, b, len, 0);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        b += k;
        len -= (size_t)k;
    }
    return 0;
}

static int run_plain(const struct opts *o)
{
    struct result r = { 0 };
    char *buf = malloc(o->max_size), *tmp = malloc(o->max_size);
    if (!buf || !tmp) return 2;
    struct sockaddr_in sa = { .sin_family = AF_INET };
    int fd;
    if (strcmp(o->role, "recv") == 0) {
        if (!o->addr || inet_pton(AF_INET, o->addr, &sa.sin_addr) != 1) return 2;
        int l = socket(AF_INET, SOCK_STREAM, 0);
        socklen_t len = sizeof(sa);
        if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1) ||
            getsockname(l, (struct sockaddr *)&sa, &len))
            return 2;
        if (write_handle(o->handle_file, &sa, sizeof(sa))) return 2;
        fd = accept(l, NULL, NULL);
        close(l);
        uint64_t t0 = 0, expect = 0;
        for (int last = 0; !last; expect++) {
            size_t size = msg_size(o, expect);
            if (full_io(fd, buf, size, 0)) { r.error = 1; break; }
            if (!t0) t0 = now_ns();
            if (!verify(buf, size, o->seed, expect, tmp)) r.corrupt++;
            uint64_t hdr[2];
            memcpy(hdr, buf, 16);
            last = hdr[1] == 1;
            r.bytes += size;
            r.messages++;
        }
        char ack = 1;
        full_io(fd, &ack, 1, 1);
        r.seconds = (double)(now_ns() - t0) / 1e9;
        print_result(o, "recv", &r);
    } else {
        if (read_handle(o->handle_file, &sa, sizeof(sa), 30)) return 2;
        fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) return 2;
        uint64_t t0 = now_ns(), stop = o->seconds > 0 ? t0 + (uint64_t)(o->seconds * 1e9) : 0;
        for (long i = 0;; i++) {
            int last = (o->messages > 0 && i + 1 >= o->messages) || (stop && now_ns() >= stop);
            size_t size = msg_size(o, (uint64_t)i);
            fill(buf, size, o->seed, (uint64_t)i, last);
            if (full_io(fd, buf, size, 1)) { r.error = 1; break; }
            r.bytes += size;
            r.messages++;
            if (last) break;
        }
        char ack;
        if (full_io(fd, &ack, 1, 0)) r.error = 1;   /* delivered, not just written */
        r.seconds = (double)(now_ns() - t0) / 1e9;
        print_result(o, "send", &r);
    }
    close(fd);
    return r.error ? 3 : r.corrupt ? 1 : 0;
}

/* ---- one end in this process, or both in two children ---- */

static int run_role(const struct opts *o, int handle_pipe_rd, int handle_pipe_wr)
{
    struct net n = { 0 };
    if (net_open(&n, o->lib, o->version)) return 2;
    char handle[NCCL_NET_HANDLE_MAXSIZE] = { 0 };
    if (strcmp(o->role, "recv") == 0) {
        void *lc = NULL;
        if (net_listen(&n, handle, &lc) != ncclSuccess) return 2;
        if (handle_pipe_wr >= 0) {
            if (write(handle_pipe_wr, handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 2;
        } else if (write_handle(o->handle_file, handle, sizeof(handle))) {
            return 2;
        }
        return run_recv(&n, o, lc);
    }
    if (handle_pipe_rd >= 0) {
        if (read(handle_pipe_rd, handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 2;
    } else if (read_handle(o->handle_file, handle, sizeof(handle), 30)) {
        return 2;
    }
    return run_send(&n, o, handle);
}

static int run_fork(struct opts o)
{
    int fds[2];
    if (pipe(fds)) return 2;
    fflush(stdout);
    pid_t rp = fork();
    if (rp == 0) { o.role = "recv"; _exit(run_role(&o, -1, fds[1])); }
    pid_t sp = fork();
    if (sp == 0) { o.role = "send"; _exit(run_role(&o, fds[0], -1)); }
    close(fds[0]);
    close(fds[1]);
    int st_r = 0, st_s = 0;
    waitpid(sp, &st_s, 0);
    waitpid(rp, &st_r, 0);
    int a = WIFEXITED(st_s) ? WEXITSTATUS(st_s) : 4, b = WIFEXITED(st_r) ? WEXITSTATUS(st_r) : 4;
    return a > b ? a : b;
}

static void usage(void)
{
    fprintf(stderr, "usage: fleet_harness --lib PATH --version 8..12|all (--fork | --role send|recv --handle-file F)\n"
                    "       [--messages N] [--seconds S] [--min-size B] [--max-size B] [--window W] [--seed S]\n"
                    "       [--trace FILE] [--progress FILE] | --plain --addr A --role R --handle-file F\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct opts o = { .window = 8, .messages = 2000, .min_size = 16, .max_size = 1 << 20, .seed = 1 };
    int all = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--fork")) { o.fork_mode = 1; continue; }
        if (!strcmp(a, "--plain")) { o.plain = 1; continue; }
        if (!v) usage();
        i++;
        if (!strcmp(a, "--lib")) o.lib = v;
        else if (!strcmp(a, "--version")) { if (!strcmp(v, "all")) all = 1; else o.version = atoi(v); }
        else if (!strcmp(a, "--role")) o.role = v;
        else if (!strcmp(a, "--handle-file")) o.handle_file = v;
        else if (!strcmp(a, "--trace")) o.trace = v;
        else if (!strcmp(a, "--progress")) o.progress = v;
        else if (!strcmp(a, "--addr")) o.addr = v;
        else if (!strcmp(a, "--stop-file")) o.stop_file = v;
        else if (!strcmp(a, "--messages")) o.messages = atol(v);
        else if (!strcmp(a, "--seconds")) o.seconds = atof(v);
        else if (!strcmp(a, "--min-size")) o.min_size = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--max-size")) o.max_size = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--window")) o.window = atoi(v);
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
        else usage();
    }
    if (o.min_size < 16) o.min_size = 16;
    if (o.max_size < o.min_size || o.max_size > (1u << 30) || o.window < 1 || o.window > MAX_WINDOW) usage();
    if ((o.seconds > 0 || o.stop_file) && o.messages == 2000) o.messages = 0;
    signal(SIGPIPE, SIG_IGN);
    if (o.plain) {
        if (!o.role || !o.handle_file) usage();
        return run_plain(&o);
    }
    if (!o.lib || (!all && (o.version < 8 || o.version > 12))) usage();
    if (all) {
        if (!o.fork_mode) usage();
        int worst = 0;
        for (int v = 8; v <= 12; v++) {
            o.version = v;
            int rc = run_fork(o);
            if (rc > worst) worst = rc;
        }
        return worst;
    }
    if (o.fork_mode) return run_fork(o);
    if (!o.role || !o.handle_file) usage();
    return run_role(&o, -1, -1);
}
