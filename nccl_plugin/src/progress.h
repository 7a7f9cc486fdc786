/* progress.c: one step of a connection (above frames.c and paths.c). */
#ifndef FLEET_PROGRESS_H
#define FLEET_PROGRESS_H

#include "transport.h"

void progress(struct conn *c) FLEET_HIDDEN;

#endif
