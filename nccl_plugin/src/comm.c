/* The NCCL-facing operations of the transport: listen, connect, accept, isend, irecv, test, close. */
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
#include "progress.h"

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
    l->token = fleet_rand64();
    struct fleet_handle h = { .magic = FLEET_MAGIC, .npaths = (uint16_t)fleet_cfg.dev[dev].npaths,
                              .chunk_kb = (uint16_t)(fleet_cfg.chunk / 1024u), .token = l->token };
    for (int i = 0; i < h.npaths; i++) {
        h.path[i].addr = fleet_cfg.dev[dev].path[i].addr.s_addr;
        h.path[i].port = ports[i];
    }
    memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
    memcpy(handle, &h, sizeof(h));
    if (fleet_registry_add(REG_LISTEN, l->token, dev, &l->inbox) != ncclSuccess) {
        free(l);
        return ncclSystemError;
    }
    *listen_comm = l;
    return ncclSuccess;
}

/* Connects in progress. NCCL calls connect() again with the same handle until a comm comes back.
 * The handle came from the peer through NCCL's bootstrap, so no byte of it is trusted: the pending
 * connection is found by the handle's address in this process together with a random tag this
 * process wrote into the handle's last 8 bytes (an honest handle has zeros there), and the handle
 * must still carry the token it was started with. */
#define MAX_CONNECTING 1024
#define TAG_AT (NCCL_NET_HANDLE_MAXSIZE - sizeof(uint64_t))
struct connecting { const void *handle; uint64_t tag, token; struct conn *c; };
static struct connecting connecting[MAX_CONNECTING];
static int nconnecting;

static struct conn *connecting_find(const void *handle, uint64_t tag, uint64_t token)
{
    struct conn *c = NULL;
    pthread_mutex_lock(&fleet_lock);
    for (int k = 0; k < nconnecting && !c; k++)
        if (connecting[k].handle == handle && connecting[k].tag == tag && connecting[k].token == token)
            c = connecting[k].c;
    pthread_mutex_unlock(&fleet_lock);
    return c;
}

static int connecting_add(const void *handle, uint64_t tag, struct conn *c)
{
    int ok = 0;
    pthread_mutex_lock(&fleet_lock);
    if (nconnecting < MAX_CONNECTING) {
        connecting[nconnecting++] = (struct connecting){ handle, tag, c->token, c };
        ok = 1;
    }
    pthread_mutex_unlock(&fleet_lock);
    return ok;
}

static void connecting_del(void *handle, struct conn *c)
{
    pthread_mutex_lock(&fleet_lock);
    for (int k = 0; k < nconnecting; k++)
        if (connecting[k].c == c) connecting[k--] = connecting[--nconnecting];
    pthread_mutex_unlock(&fleet_lock);
    memset((char *)handle + TAG_AT, 0, sizeof(uint64_t));
}

static struct conn *connect_start(int dev, void *handle, const struct fleet_handle *h, ncclResult_t *rc)
{
    *rc = ncclInvalidArgument;
    if (h->magic != FLEET_MAGIC || h->npaths < 1 || h->npaths > FLEET_MAX_PATHS) {
        FLEET_WARN("NET/fleet: connect on %s: not a handle of this plugin (magic %08x, %u paths)",
                   fleet_cfg.dev[dev].name, h->magic, h->npaths);
        return NULL;
    }
    int npaths = h->npaths < fleet_cfg.dev[dev].npaths ? h->npaths : fleet_cfg.dev[dev].npaths;
    struct conn *c = conn_new(ROLE_SEND, dev, npaths, fleet_cfg.chunk);
    *rc = ncclSystemError;
    if (!c) {
        FLEET_WARN("NET/fleet: connect on %s: out of memory", fleet_cfg.dev[dev].name);
        return NULL;
    }
    c->token = h->token;
    c->conn_id = fleet_rand64();
    for (int i = 0; i < npaths; i++) {
        c->raddr[i].s_addr = h->path[i].addr;
        c->rport[i] = h->path[i].port;
    }
    uint64_t tag = fleet_rand64();
    if (!connecting_add(handle, tag, c)) {
        FLEET_WARN("NET/fleet: connect on %s: %d connects already in progress", fleet_cfg.dev[dev].name,
                   MAX_CONNECTING);
        free(c);
        return NULL;
    }
    memcpy((char *)handle + TAG_AT, &tag, sizeof(tag));
    return c;
}

ncclResult_t fleet_connect(int dev, void *handle, void **send_comm)
{
    *send_comm = NULL;
    if (dev < 0 || dev >= fleet_cfg.ndevs) return ncclInvalidArgument;
    struct fleet_handle h;
    uint64_t tag;
    memcpy(&h, handle, sizeof(h));
    memcpy(&tag, (char *)handle + TAG_AT, sizeof(tag));
    struct conn *c = NULL;
    if (tag && !(c = connecting_find(handle, tag, h.token))) {
        FLEET_WARN("NET/fleet: connect on %s: refused a handle whose spare bytes are not zero and name no "
                   "connect in progress here", fleet_cfg.dev[dev].name);
        return ncclInvalidArgument;
    }
    if (!c) {
        ncclResult_t rc;
        if (!(c = connect_start(dev, handle, &h, &rc))) return rc;
    }
    progress(c);
    /* done once every path is up or has failed at least once, with one of them up */
    int up = 0, settled = 1;
    for (int i = 0; i < c->npaths; i++) {
        if (c->p[i].state == P_UP) up++;
        else if (!(c->p[i].state == P_DEAD && c->p[i].last_attempt)) settled = 0;
    }
    if (up && settled) {
        connecting_del(handle, c);
        c->established = 1;
        COUNT(connections, 1);
        fleet_event("connected", c->conn_id, -1, "", "", (uint64_t)up);
        *send_comm = c;
        return ncclSuccess;
    }
    if (fleet_now_ms() - c->created > 30000u) {
        FLEET_WARN("NET/fleet: connect on %s: no path came up within 30 s", fleet_cfg.dev[dev].name);
        connecting_del(handle, c);
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
    /* registered in the same critical section: a later path of this connection must not land
     * in the listen inbox, where nobody would collect it */
    if (fleet_registry_add_locked(REG_RECV, c->conn_id, l->dev, &c->inbox) != ncclSuccess) {
        pthread_mutex_unlock(&fleet_lock);
        for (int k = 0; k < c->inbox.n; k++) close(c->inbox.item[k].fd);
        free(c);
        return ncclSystemError;
    }
    pthread_mutex_unlock(&fleet_lock);
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
        FLEET_WARN("NET/fleet: connection %016llx failed: %s", (unsigned long long)c->conn_id,
                   c->fail_why && strcmp(c->fail_why, "all_paths_dead") ? c->fail_why : "every path is down");
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
