/* The registry of the process's listenComms and recvComms: where listener.c delivers an accepted
 * socket, by the connection id (a returning path of a receive connection) or the listen token
 * (a new connection) of its HELLO. It holds FLEET_MAX_COMMS comms per device, what getProperties
 * advertises as maxComms, and grows as needed; a registration past that fails with a warning. */
#include <stdlib.h>
#include <unistd.h>
#include "fleet.h"

struct reg { int kind, dev; uint64_t key; struct fleet_inbox *box; };

static struct reg *regs;
static int nregs, capregs;
static int ndevregs[FLEET_MAX_DEVS];

ncclResult_t fleet_registry_add_locked(int kind, uint64_t key, int dev, struct fleet_inbox *box)
{
    if (ndevregs[dev] >= FLEET_MAX_COMMS) {
        FLEET_WARN("NET/fleet: %s: %d comms are open on this device, the most it advertises (maxComms)",
                   fleet_cfg.dev[dev].name, FLEET_MAX_COMMS);
        return ncclSystemError;
    }
    if (nregs == capregs) {
        int cap = capregs ? 2 * capregs : 64;
        struct reg *more = realloc(regs, (size_t)cap * sizeof(*regs));
        if (!more) {
            FLEET_WARN("NET/fleet: %s: out of memory for comm %d", fleet_cfg.dev[dev].name, nregs + 1);
            return ncclSystemError;
        }
        regs = more;
        capregs = cap;
    }
    box->reg = nregs;
    regs[nregs++] = (struct reg){ kind, dev, key, box };
    ndevregs[dev]++;
    return ncclSuccess;
}

ncclResult_t fleet_registry_add(int kind, uint64_t key, int dev, struct fleet_inbox *box)
{
    pthread_mutex_lock(&fleet_lock);
    ncclResult_t rc = fleet_registry_add_locked(kind, key, dev, box);
    pthread_mutex_unlock(&fleet_lock);
    return rc;
}

void fleet_registry_del(struct fleet_inbox *box)
{
    pthread_mutex_lock(&fleet_lock);
    int i = box->reg;
    if (i >= 0 && i < nregs && regs[i].box == box) {
        ndevregs[regs[i].dev]--;
        regs[i] = regs[--nregs];
        regs[i].box->reg = i;
    }
    box->reg = -1;
    for (int k = 0; k < box->n; k++) close(box->item[k].fd);
    box->n = 0;
    pthread_mutex_unlock(&fleet_lock);
}

struct fleet_inbox *fleet_registry_find(uint64_t conn_id, uint64_t token)
{
    for (int i = 0; i < nregs; i++)
        if (regs[i].kind == REG_RECV && regs[i].key == conn_id) return regs[i].box;
    for (int i = 0; i < nregs; i++)
        if (regs[i].kind == REG_LISTEN && regs[i].key == token) return regs[i].box;
    return NULL;
}
