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

void fleet_counters_flush(uint64_t now, int force)
{
    if (!fleet_cfg.counters_dir[0] || counters_broken) return;
    if (!force && now - last_flush < 100) return;
    if (memcmp(&flushed, &fleet_ctr, sizeof(flushed)) == 0 && !force) return;
    last_flush = now;
    char path[300], tmp[320], body[1024];
    snprintf(path, sizeof(path), "%s/%d.json", fleet_cfg.counters_dir, (int)getpid());
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
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
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 && errno == ENOENT) {
        /* create the directory (one level under an existing parent is enough for /run/fleetctl) */
        char parent[200];
        snprintf(parent, sizeof(parent), "%s", fleet_cfg.counters_dir);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) { *slash = 0; mkdir(parent, 0755); }
        mkdir(fleet_cfg.counters_dir, 0755);
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    }
    if (fd < 0) { counters_broken = 1; return; }
    int ok = write(fd, body, (size_t)n) == n;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0) flushed = *c;
    else unlink(tmp);
}
