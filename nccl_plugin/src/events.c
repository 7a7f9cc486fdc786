/* Events as JSON lines in FLEET_NET_LOG, counters in <FLEET_NET_COUNTERS_DIR>/<pid>.json
 * (rewritten atomically at most every 100 ms) for `fleetctl failover watch`. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "fleet.h"

FLEET_HIDDEN struct fleet_counters fleet_ctr;
static struct fleet_counters flushed;
static uint64_t last_flush;
static int log_fd = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static int counters_broken;

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void open_log(void)
{
    if (fleet_cfg.log_path[0])
        log_fd = open(fleet_cfg.log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
}

/* Only fixed strings from this library reach the log, never peer data, so no escaping needed
 * beyond interface names, which config.c restricted to [A-Za-z0-9._-@:]. */
void fleet_event(const char *event, uint64_t conn_id, int path, const char *ifname,
                 const char *reason, uint64_t value)
{
    pthread_once(&log_once, open_log);
    FLEET_INFO("NET/fleet: %s conn=%016llx path=%d if=%s reason=%s value=%llu", event,
               (unsigned long long)conn_id, path, ifname ? ifname : "", reason ? reason : "",
               (unsigned long long)value);
    if (log_fd < 0) return;
    char line[512];
    int n = snprintf(line, sizeof(line),
                     "{\"ts\": %.6f, \"mono_ns\": %llu, \"pid\": %d, \"event\": \"%s\", \"conn\": \"%016llx\", "
                     "\"path\": %d, \"iface\": \"%s\", \"reason\": \"%s\", \"value\": %llu}\n",
                     wall_now(), (unsigned long long)mono_ns(), (int)getpid(), event,
                     (unsigned long long)conn_id, path, ifname ? ifname : "", reason ? reason : "",
                     (unsigned long long)value);
    if (n > 0 && (size_t)n < sizeof(line) && write(log_fd, line, (size_t)n) < 0) {
        /* a full disk must not disturb the job: drop the event */
    }
}

/* The counters directory, opened once (no symlink as its last component). It must be this
 * process's own, or root's and writable by nobody else (or sticky): a directory another user may
 * write in would let that user replace this process's file. The plugin creates a missing directory
 * when it can (its parent writable: root, or a directory of the user's own); under /run/fleetctl a
 * job that is not root's gets /run/fleetctl/failover/<uid> from spank_fleetctl or the Prolog
 * (docs/failover.md). Any problem is said once and ends the counters, never the job. */
static int counters_dir_fd(void)
{
    static int dfd = -1;
    if (dfd >= 0) return dfd;
    const char *dir = fleet_cfg.counters_dir;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {   /* mkdir -p, each missing level 0755 */
        char path[sizeof(fleet_cfg.counters_dir)];
        snprintf(path, sizeof(path), "%s", dir);
        for (char *slash = strchr(path + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
            *slash = 0;
            mkdir(path, 0755);
            *slash = '/';
        }
        if (mkdir(dir, 0755) == 0 || errno == EEXIST) fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    struct stat st;
    const char *why = NULL;
    if (fd < 0) why = strerror(errno);
    else if (fstat(fd, &st) != 0) why = strerror(errno);
    else if (st.st_uid != geteuid() && st.st_uid != 0)
        why = "owned by another user";
    else if (st.st_uid != geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
        why = "writable by other users";
    if (why) {
        FLEET_WARN("NET/fleet: counters directory %s: %s; no counters for `fleetctl failover watch` "
                   "(FLEET_NET_COUNTERS_DIR; for a job that is not root's, spank_fleetctl or the Prolog "
                   "prepares /run/fleetctl/failover/<uid>)", dir, why);
        if (fd >= 0) close(fd);
        counters_broken = 1;
        return -1;
    }
    dfd = fd;
    return dfd;
}

void fleet_counters_flush(uint64_t now, int force)
{
    static int write_warned;
    if (!fleet_cfg.counters_dir[0] || counters_broken) return;
    if (!force && now - last_flush < 100) return;
    if (memcmp(&flushed, &fleet_ctr, sizeof(flushed)) == 0 && !force) return;
    last_flush = now;
    int dfd = counters_dir_fd();
    if (dfd < 0) return;
    char name[32], tmp[40], body[1024];
    snprintf(name, sizeof(name), "%d.json", (int)getpid());
    snprintf(tmp, sizeof(tmp), "%s.tmp", name);
    const struct fleet_counters *c = &fleet_ctr;
    int n = snprintf(body, sizeof(body),
                     "{\"pid\": %d, \"updated\": %.3f, \"connections\": %llu, \"paths_up\": %llu, "
                     "\"path_down\": %llu, \"replayed_bytes\": %llu, \"replayed_msgs\": %llu, "
                     "\"failbacks\": %llu, \"bytes_sent\": %llu, \"bytes_received\": %llu, "
                     "\"duplicate_chunks\": %llu, \"reconnect_failures\": %llu, \"errors\": %llu}\n",
                     (int)getpid(), wall_now(), (unsigned long long)c->connections,
                     (unsigned long long)c->paths_up, (unsigned long long)c->path_down,
                     (unsigned long long)c->replayed_bytes, (unsigned long long)c->replayed_msgs,
                     (unsigned long long)c->failbacks, (unsigned long long)c->bytes_sent,
                     (unsigned long long)c->bytes_received, (unsigned long long)c->dup_chunks,
                     (unsigned long long)c->reconnect_failures, (unsigned long long)c->errors);
    if (n <= 0 || (size_t)n >= sizeof(body)) return;
    /* a new file every time (O_EXCL, no symlink), renamed over the last one */
    unlinkat(dfd, tmp, 0);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    int ok = fd >= 0 && write(fd, body, (size_t)n) == n;
    if (fd >= 0) ok = close(fd) == 0 && ok;
    if (ok && renameat(dfd, tmp, dfd, name) == 0) {
        flushed = *c;
        return;
    }
    if (!write_warned) {
        write_warned = 1;
        FLEET_WARN("NET/fleet: cannot write counters %s/%s: %s", fleet_cfg.counters_dir, name, strerror(errno));
    }
    if (fd >= 0) unlinkat(dfd, tmp, 0);
}
