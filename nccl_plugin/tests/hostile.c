/* Regression scenarios of a hostile peer or a hostile handle against libnccl-net-fleet.so (issue 20).
 *
 *   fleet_hostile --lib PATH SCENARIO [--free]
 *
 * Scenarios: late-chunk, late-chunk-256 (defect 3), pending-flood (8), registry (9),
 * handle-pointer (10), props (what every exported version reports). Exit 0: the property holds;
 * 1: violated (the reason on stderr); 2: setup failed. A crash is a failure too. --free: free a
 * completed message's buffer at once (an ASan build then reports any later write into it). */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fleet_net_v8.h"
#include "fleet_net_v9.h"
#include "fleet_net_v10.h"
#include "fleet_net_v11.h"
#include "peer.h"

static struct plugin pl;
static const char *lib;
static int free_early;

#define FAIL(...) do { fprintf(stderr, "VIOLATION: " __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)
#define SETUP(...) do { fprintf(stderr, "setup: " __VA_ARGS__); fprintf(stderr, "\n"); exit(2); } while (0)

static uint8_t pat(uint64_t seq, uint64_t off)
{
    return (uint8_t)(seq * 131 + off * 7 + (off >> 8));
}

static void fill(uint8_t *b, uint64_t seq, uint64_t off, size_t n)
{
    for (size_t i = 0; i < n; i++) b[i] = pat(seq, off + i);
}

/* test() the request up to `rounds` times; 1 when done (size in *size) */
static int pump(void *req, int rounds, int *size)
{
    for (int k = 0; k < rounds; k++) {
        int done = 0, sz = -1;
        ncclResult_t rc = pl.net->test(req, &done, &sz);
        if (rc != ncclSuccess) FAIL("test() failed (%d) on a well-formed exchange", rc);
        if (done) { if (size) *size = sz; return 1; }
        usleep(50);
    }
    return 0;
}

static void *post(struct rpeer *p, void *buf, size_t size)
{
    void *req = NULL, *mh = NULL;
    size_t sizes[1] = { size };
    void *data[1] = { buf };
    int tags[1] = { 0 };
    pl.net->regMr(p->rc, buf, size, NCCL_PTR_HOST, &mh);
    for (int k = 0; k < 1000 && !req; k++)
        if (pl.net->irecv(p->rc, 1, data, sizes, tags, &mh, NULL, &req) != ncclSuccess) FAIL("irecv failed");
    if (!req) SETUP("irecv gave no request");
    return req;
}

/* Defect 3: chunk k of message A starts on path 0, A is completed on path 1 and handed back, the
 * request slot is reused 32 messages later by B; then path 0 finishes its chunk of A. */
static int late_chunk(uint32_t nchunks, uint32_t k)
{
    struct rpeer p;
    const uint32_t chunk = 4096;
    if (rpeer_open(&pl, &p, 2, 4, 5.0) != 0) SETUP("no connection");
    uint64_t total = (uint64_t)nchunks * chunk;
    uint8_t *a = malloc(total), *tmp = malloc(chunk), *b = calloc(1, chunk);
    void *ra = post(&p, a, total);
    fill(tmp, 1, (uint64_t)k * chunk, chunk);
    if (rpeer_data(&p, 0, 1, (uint64_t)k * chunk, total, tmp, 100) != 0) SETUP("write");
    pump(ra, 50, NULL);   /* path 0 is now in the middle of chunk k */
    int size = -1, done = 0;
    for (uint32_t j = 0; j < nchunks && !done; j++) {
        fill(tmp, 1, (uint64_t)j * chunk, chunk);
        if (rpeer_data(&p, 1, 1, (uint64_t)j * chunk, total, tmp, chunk) != 0) SETUP("write");
        done = pump(ra, j + 1 == nchunks ? 4000 : 2, &size);
        rpeer_drain(&p);
    }
    if (!done || (uint64_t)size != total) SETUP("message 1 not complete over path 1 (size %d)", size);
    for (uint64_t i = 0; i < total; i++)
        if (a[i] != pat(1, i)) FAIL("message 1 byte %llu wrong", (unsigned long long)i);
    if (free_early) { free(a); a = NULL; }
    else memset(a, 0xee, total);   /* the caller owns it again: nothing may write it now */
    /* 31 more messages, so that message 33 gets message 1's request slot */
    for (uint64_t s = 2; s <= 32; s++) {
        uint8_t small[16], got[16];
        void *r = post(&p, got, sizeof(got));
        fill(small, s, 0, sizeof(small));
        if (rpeer_data(&p, 1, s, 0, sizeof(small), small, sizeof(small)) != 0) SETUP("write");
        if (!pump(r, 4000, &size) || size != 16 || memcmp(got, small, 16) != 0) SETUP("message %llu", (unsigned long long)s);
        rpeer_drain(&p);
    }
    void *rb = post(&p, b, chunk);
    if (nchunks <= 64) {   /* B's header first: B knows its chunk count when the stale chunk lands */
        if (rpeer_data(&p, 1, 33, 0, chunk, NULL, 0) != 0) SETUP("write");
        pump(rb, 50, NULL);
    }
    fill(tmp, 1, (uint64_t)k * chunk, chunk);
    if (write_all(p.fd[0], tmp + 100, chunk - 100, 2.0) != 0) SETUP("write");
    if (pump(rb, 200, &size))
        FAIL("message 33 reported complete (%d bytes) before any of its payload was sent", size);
    fill(tmp, 33, 0, chunk);
    if (nchunks > 64) { if (rpeer_data(&p, 1, 33, 0, chunk, tmp, chunk) != 0) SETUP("write"); }
    else if (write_all(p.fd[1], tmp, chunk, 2.0) != 0) SETUP("write");
    if (!pump(rb, 4000, &size)) FAIL("message 33 never completed");
    if (size != (int)chunk || memcmp(b, tmp, chunk) != 0) FAIL("message 33 has size %d or wrong bytes", size);
    if (a)
        for (uint64_t i = 0; i < total; i++)
            if (a[i] != 0xee) FAIL("a chunk of message 1 was written into its buffer after test() returned it");
    rpeer_close(&pl, &p);
    free(a); free(b); free(tmp);
    return 0;
}

/* Defect 10: the handle comes from the peer through NCCL's bootstrap; its spare bytes are data. */
static int handle_pointer(void)
{
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *sc = NULL;
    if (pl.net->listen(pl.ctx, 0, handle, &lc) != ncclSuccess) SETUP("listen");
    memset(handle + 80, 0x41, sizeof(handle) - 80);
    plugin_warnings_clear();
    ncclResult_t rc = pl.net->connect(pl.ctx, 0, handle, &sc, NULL);
    if (rc == ncclSuccess) FAIL("connect accepted a handle with foreign bytes in its spare area (comm %p)", sc);
    if (!strstr(plugin_warnings, "NET/fleet")) FAIL("connect refused the handle without a warning");
    /* the honest handle still connects */
    struct rpeer p;
    if (rpeer_open(&pl, &p, 2, 256, 5.0) != 0) FAIL("no connection after the refused handle");
    rpeer_close(&pl, &p);
    pl.net->closeListen(lc);
    return 0;
}

/* Defect 9: every comm the plugin accepts (listenComms and recvComms) must be reachable, up to what
 * getProperties advertises as maxComms; the one past it must fail with a warning. */
static int registry(void)
{
    ncclNetProperties_v12_t props;
    if (pl.net->getProperties(0, &props) != ncclSuccess) SETUP("getProperties");
    int m = props.maxComms;
    if (m < 1 || m > (1 << 20)) FAIL("maxComms %d", m);
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL;
    int ok = 0;
    plugin_quiet = 1;
    for (int i = 0; i < m - 2; i++) {
        if (pl.net->listen(pl.ctx, 0, handle, &lc) != ncclSuccess) FAIL("listen %d of %d advertised failed", i + 1, m);
        ok++;
    }
    plugin_quiet = 0;
    /* the last two advertised: one more listenComm and the recvComm of its connection, which
     * must work end to end */
    struct rpeer p;
    if (rpeer_open(&pl, &p, 2, 256, 5.0) != 0)
        FAIL("listen %d (maxComms %d) returned a handle nobody can connect to", ok + 1, m);
    plugin_warnings_clear();
    ncclResult_t rc = pl.net->listen(pl.ctx, 0, handle, &lc);
    if (rc == ncclSuccess) FAIL("comm %d past maxComms %d succeeded: more comms than advertised", ok + 3, m);
    if (!strstr(plugin_warnings, "NET/fleet")) FAIL("listen past maxComms failed without a warning");
    rpeer_close(&pl, &p);   /* a slot is free again */
    if (pl.net->listen(pl.ctx, 0, handle, &lc) != ncclSuccess) FAIL("listen after a close failed");
    fprintf(stderr, "registry: %d comms held = maxComms\n", m);
    return 0;
}

/* Defect 8: hundreds of silent connections to the listening sockets must not keep a real
 * connection out. */
static int pending_flood(void)
{
    enum { SILENT = 300 };
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *sc = NULL, *rc = NULL;
    if (pl.net->listen(pl.ctx, 0, handle, &lc) != ncclSuccess) SETUP("listen");
    struct hview h;
    handle_get(handle, &h);
    int fd[SILENT];
    for (int i = 0; i < SILENT; i++) fd[i] = -1;
    double t0 = mono_s(), end = t0 + 10.0;
    long reopened = 0;
    while (!(sc && rc)) {
        if (mono_s() > end) FAIL("no connection within 10 s while %d silent sockets were held (%ld reopened)", SILENT, reopened);
        for (int i = 0; i < SILENT; i++) {   /* keep SILENT connections open, as an attacker would */
            if (fd[i] >= 0) {
                struct pollfd q = { .fd = fd[i], .events = POLLIN };
                char c;
                if (poll(&q, 1, 0) == 1 && (q.revents & (POLLERR | POLLHUP) || recv(fd[i], &c, 1, MSG_DONTWAIT) == 0)) {
                    close(fd[i]);
                    fd[i] = -1;
                    reopened++;
                }
            }
            if (fd[i] < 0) fd[i] = tcp_connect(h.addr[i % h.npaths], h.port[i % h.npaths], 1);
        }
        if (!sc && pl.net->connect(pl.ctx, 0, handle, &sc, NULL) != ncclSuccess) FAIL("connect failed");
        if (!rc && pl.net->accept(lc, &rc, NULL) != ncclSuccess) FAIL("accept failed");
    }
    fprintf(stderr, "pending-flood: connected in %.2f s, %ld silent sockets closed by the plugin\n", mono_s() - t0, reopened);
    /* one message across, to be sure the connection is real */
    static char out[65536], in[65536];
    fill((uint8_t *)out, 7, 0, sizeof(out));
    void *sreq = NULL, *rreq = NULL, *mh = NULL;
    size_t sizes[1] = { sizeof(in) };
    void *data[1] = { in };
    int tags[1] = { 0 }, done_s = 0, done_r = 0, sz;
    while (!sreq) if (pl.net->isend(sc, out, sizeof(out), 0, mh, NULL, &sreq) != ncclSuccess) FAIL("isend");
    while (!rreq) if (pl.net->irecv(rc, 1, data, sizes, tags, &mh, NULL, &rreq) != ncclSuccess) FAIL("irecv");
    end = mono_s() + 10.0;
    while (!(done_s && done_r) && mono_s() < end) {
        if (!done_s && pl.net->test(sreq, &done_s, &sz) != ncclSuccess) FAIL("send test");
        if (!done_r && pl.net->test(rreq, &done_r, &sz) != ncclSuccess) FAIL("recv test");
    }
    if (!(done_s && done_r) || memcmp(in, out, sizeof(in)) != 0) FAIL("the message did not cross intact");
    for (int i = 0; i < SILENT; i++) if (fd[i] >= 0) close(fd[i]);
    return 0;
}

/* What every exported version reports and exports: the same device, in each version's layout. */
static int props(void)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    const ncclNet_v8_t *v8 = dlsym(h, "ncclNetPlugin_v8");
    const ncclNet_v9_t *v9 = dlsym(h, "ncclNetPlugin_v9");
    const ncclNet_v10_t *v10 = dlsym(h, "ncclNetPlugin_v10");
    const ncclNet_v11_t *v11 = dlsym(h, "ncclNetPlugin_v11");
    const ncclNet_v12_t *v12 = pl.net;
    if (!v8 || !v9 || !v10 || !v11) SETUP("tables");
    ncclNetProperties_v8_t p8;
    ncclNetProperties_v9_t p9;
    ncclNetProperties_v10_t p10;
    ncclNetProperties_v11_t p11;
    ncclNetProperties_v12_t p12;
    if (v8->getProperties(0, &p8) || v9->getProperties(0, &p9) || v10->getProperties(0, &p10) ||
        v11->getProperties(0, &p11) || v12->getProperties(0, &p12))
        FAIL("getProperties failed");
    if (v12->getProperties(99, &p12) != ncclInvalidArgument || v8->getProperties(-1, &p8) != ncclInvalidArgument)
        FAIL("getProperties of a device that does not exist");
    v12->getProperties(0, &p12);
#define SAME(f) if (p8.f != p12.f || p9.f != p12.f || p10.f != p12.f || p11.f != p12.f) FAIL("field " #f " differs between versions")
    SAME(guid); SAME(ptrSupport); SAME(regIsGlobal); SAME(speed); SAME(port); SAME(latency); SAME(maxComms);
    SAME(maxRecvs); SAME(netDeviceType); SAME(netDeviceVersion);
#undef SAME
#define SAME9(f) if (p9.f != p12.f || p10.f != p12.f || p11.f != p12.f) FAIL("field " #f " differs between versions")
    SAME9(forceFlush); SAME9(maxP2pBytes); SAME9(maxCollBytes); SAME9(vProps.ndevs); SAME9(vProps.devs[0]);
#undef SAME9
    if (strcmp(p8.name, p12.name) || strcmp(p9.name, p12.name) || strcmp(p10.name, p12.name) || strcmp(p11.name, p12.name))
        FAIL("names differ");
    if (p11.maxMultiRequestSize != 1 || p12.maxMultiRequestSize != 1 || p12.railId != -1 || p12.planeId != -1)
        FAIL("v11/v12 fields");
    if (p12.ptrSupport != NCCL_PTR_HOST || p12.maxRecvs != 1 || p12.vProps.ndevs != 1 || p12.vProps.devs[0] != 0 ||
        p12.maxP2pBytes != (size_t)1 << 30 || p12.pciPath || p12.forceFlush || p12.regIsGlobal || p12.speed <= 0)
        FAIL("device properties");
    if (strcmp(v8->name, "fleet") || strcmp(v9->name, "fleet") || strcmp(v10->name, "fleet") ||
        strcmp(v11->name, "fleet") || strcmp(v12->name, "fleet"))
        FAIL("table names");
    if (v8->regMrDmaBuf || v8->getDeviceMr || v8->irecvConsumed || v9->regMrDmaBuf || v9->getDeviceMr ||
        v9->irecvConsumed || v9->makeVDevice || v10->regMrDmaBuf || v10->getDeviceMr || v10->irecvConsumed ||
        v10->makeVDevice || v11->regMrDmaBuf || v11->getDeviceMr || v11->irecvConsumed || v11->makeVDevice ||
        v12->regMrDmaBuf || v12->getDeviceMr || v12->irecvConsumed || v12->makeVDevice)
        FAIL("an optional member is set");
    if (!v11->finalize || !v11->setNetAttr || !v12->finalize || !v12->setNetAttr) FAIL("finalize/setNetAttr");
    void *ctx = NULL;
    if (v11->init(&ctx, 5, NULL, NULL, NULL) != ncclSuccess || !ctx || v11->finalize(ctx) != ncclSuccess)
        FAIL("v11 init/finalize");
    ncclNetAttr_v12_t attr;
    memset(&attr, 0, sizeof(attr));
    if (v12->setNetAttr(pl.ctx, &attr) != ncclSuccess) FAIL("setNetAttr");
    /* argument checks each version adds: v8's int sizes, irecv's one buffer */
    void *req = (void *)1;
    if (v8->isend(NULL, NULL, -1, 0, NULL, &req) != ncclInvalidArgument) FAIL("v8 isend of a negative size");
    int neg = -5, tag = 0;
    void *data = NULL, *mh = NULL;
    req = (void *)1;
    if (v8->irecv(NULL, 1, &data, &neg, &tag, &mh, &req) != ncclInternalError || req) FAIL("v8 irecv of a negative size");
    void *fr = (void *)1;
    int fsz = 0;
    if (v9->iflush(NULL, 1, &data, &fsz, &mh, &fr) != ncclSuccess || fr) FAIL("iflush");
    if (v10->regMr(NULL, NULL, 0, NCCL_PTR_CUDA, &mh) == ncclSuccess) FAIL("regMr of CUDA memory");
    int ndev = 0;
    if (v8->devices(&ndev) || ndev != 1) FAIL("devices");
    return 0;
}

int main(int argc, char **argv)
{
    const char *scenario = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--lib") && i + 1 < argc) lib = argv[++i];
        else if (!strcmp(argv[i], "--free")) free_early = 1;
        else scenario = argv[i];
    }
    if (!lib || !scenario) {
        fprintf(stderr, "usage: fleet_hostile --lib PATH late-chunk|late-chunk-256|pending-flood|registry|"
                        "handle-pointer|props [--free]\n");
        return 2;
    }
    if (plugin_open(&pl, lib) != 0) return 2;
    int rc;
    if (!strcmp(scenario, "late-chunk")) rc = late_chunk(2, 0);
    else if (!strcmp(scenario, "late-chunk-256")) rc = late_chunk(300, 280);
    else if (!strcmp(scenario, "pending-flood")) rc = pending_flood();
    else if (!strcmp(scenario, "registry")) rc = registry();
    else if (!strcmp(scenario, "handle-pointer")) rc = handle_pointer();
    else if (!strcmp(scenario, "props")) rc = props();
    else { fprintf(stderr, "unknown scenario %s\n", scenario); return 2; }
    if (rc == 0) printf("ok %s\n", scenario);
    return rc;
}
