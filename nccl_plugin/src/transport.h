/* The multipath connection: the data shared by paths.c (path life: connect, failure, replay,
 * fail-back), frames.c (the wire: frames in and out), progress.c (one step of both) and comm.c
 * (the NCCL-facing operations). Each of them declares its functions in its own header; the calls
 * go one way only: comm -> progress -> frames -> paths. */
#ifndef FLEET_TRANSPORT_H
#define FLEET_TRANSPORT_H

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
    uint64_t last_tx;         /* when a frame last went out on it */
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
    struct req *rreq;     /* the request the payload goes to (NULL: dropped into scratch) */
    uint64_t rseq;        /* its sequence number */
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
    const char *fail_why; /* a fixed string: why the connection failed */
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

#endif
