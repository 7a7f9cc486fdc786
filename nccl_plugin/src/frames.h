/* frames.c: the wire side of a connection, above paths.c. */
#ifndef FLEET_FRAMES_H
#define FLEET_FRAMES_H

#include "transport.h"

void read_path(struct conn *c, int i) FLEET_HIDDEN;
void write_paths(struct conn *c) FLEET_HIDDEN;
void queue_ack(struct conn *c) FLEET_HIDDEN;

#endif
