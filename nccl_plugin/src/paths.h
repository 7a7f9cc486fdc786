/* paths.c: the life of a connection's paths (the lowest layer of the transport). */
#ifndef FLEET_PATHS_H
#define FLEET_PATHS_H

#include "transport.h"

uint64_t fleet_rand64(void) FLEET_HIDDEN;
const char *path_if(struct conn *c, int i) FLEET_HIDDEN;
void ctrl_push(struct path *p, int type, int path, uint16_t gen, uint64_t seq) FLEET_HIDDEN;
int first_up(struct conn *c) FLEET_HIDDEN;
void path_reset_io(struct path *p) FLEET_HIDDEN;
void path_kill(struct conn *c, int i, const char *reason, int tell_peer) FLEET_HIDDEN;
void path_up(struct conn *c, int i) FLEET_HIDDEN;
void conn_fail(struct conn *c, const char *why) FLEET_HIDDEN;
/* the steps progress.c takes */
void paths_take_inbox(struct conn *c, uint64_t now) FLEET_HIDDEN;      /* receive side: adopt new paths */
void path_maybe_reconnect(struct conn *c, int i, uint64_t now) FLEET_HIDDEN;   /* send side: fail-back */
void path_connecting_progress(struct conn *c, int i, short revents, uint64_t now) FLEET_HIDDEN;
void paths_check_stalls(struct conn *c, uint64_t now) FLEET_HIDDEN;     /* heartbeats, ack timeout */

#endif
