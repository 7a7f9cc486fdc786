/* One step of a connection, taken by every NCCL call on it (the plugin has no thread of its own):
 * the process-wide poll (links, listeners, counters), paths adopted, checked and reconnected
 * (paths.c), frames read and written (frames.c), and the connection failed once no path has been
 * up for FLEET_NET_DEAD_GRACE_MS. */
#include <poll.h>
#include "fleet.h"
#include "frames.h"
#include "paths.h"
#include "progress.h"

void progress(struct conn *c)
{
    fleet_global_poll();
    uint64_t now = fleet_now_ms();
    if (c->role == ROLE_RECV) paths_take_inbox(c, now);
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
        if (c->role == ROLE_SEND && p->state == P_DEAD) path_maybe_reconnect(c, i, now);
        if (p->fd >= 0) {
            pfd[i].fd = p->fd;
            pfd[i].events = POLLIN | (p->state == P_CONNECTING ? POLLOUT : 0);
        }
    }
    if (poll(pfd, (nfds_t)c->npaths, 0) < 0) return;
    for (int i = 0; i < c->npaths; i++) {
        struct path *p = &c->p[i];
        if (p->fd < 0) continue;
        if (p->state == P_CONNECTING || p->state == P_HELLO_WAIT) path_connecting_progress(c, i, pfd[i].revents, now);
        if (p->fd >= 0 && p->state != P_CONNECTING && (pfd[i].revents & (POLLIN | POLLERR | POLLHUP) || p->rstage == 1))
            read_path(c, i);
    }
    if (c->role == ROLE_RECV) queue_ack(c);
    paths_check_stalls(c, now);
    write_paths(c);

    if (first_up(c) >= 0 || !c->established) {
        c->all_dead_since = 0;
    } else if (!c->failed && !c->peer_bye) {
        if (!c->all_dead_since) c->all_dead_since = now;
        if (now - c->all_dead_since >= (uint64_t)fleet_cfg.dead_grace_ms)
            conn_fail(c, "all_paths_dead");
    }
}
