/* Device groups and tunables from the environment (see docs/failover.md):
 *   FLEET_NET_IFACES  "eth0,eth1;eth2,eth3": one virtual device per ';'-group, one path per
 *                     entry; an entry is an interface name or a local IPv4 address.
 *                     Unset: every up, non-loopback IPv4 interface, in one device.
 *   FLEET_NET_HOLDDOWN_MS, FLEET_NET_TIMEOUT_MS, FLEET_NET_ACK_TIMEOUT_MS, FLEET_NET_CONNECT_TIMEOUT_MS,
 *   FLEET_NET_HELLO_TIMEOUT_MS, FLEET_NET_DEAD_GRACE_MS, FLEET_NET_CHUNK_KB, FLEET_NET_LOG, FLEET_NET_COUNTERS_DIR. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fleet.h"

static int env_int(const char *name, int def, int lo, int hi, int *out)
{
    const char *s = getenv(name);
    if (!s || !*s) { *out = def; return 0; }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        FLEET_WARN("NET/fleet: %s=%.32s is not an integer in [%d, %d]", name, s, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int env_path(const char *name, const char *def, char *out, size_t cap)
{
    const char *s = getenv(name);
    if (!s) s = def;
    if (strlen(s) >= cap || (*s && *s != '/' && strcmp(s, "off") != 0)) {
        FLEET_WARN("NET/fleet: %s must be an absolute path shorter than %zu bytes (or \"off\")", name, cap);
        return -1;
    }
    snprintf(out, cap, "%s", strcmp(s, "off") == 0 ? "" : s);
    return 0;
}

static int valid_ifname(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= IF_NAMESIZE) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-@:", s[i])) return 0;
    return 1;
}

/* Resolve one entry to (interface, IPv4 address): by name, by exact address, or by the
 * interface whose subnet holds the address (127.0.0.2 is on lo through 127.0.0.0/8). */
static int resolve(const char *entry, struct ifaddrs *ifs, struct fleet_path_cfg *out)
{
    struct in_addr want;
    int is_addr = inet_pton(AF_INET, entry, &want) == 1;
    if (!is_addr && !valid_ifname(entry)) return -1;
    struct ifaddrs *subnet = NULL;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_name) continue;
        struct in_addr a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        if (!is_addr && strcmp(i->ifa_name, entry) == 0) {
            out->addr = a;
            snprintf(out->ifname, sizeof(out->ifname), "%s", i->ifa_name);
            return 0;
        }
        if (is_addr && a.s_addr == want.s_addr) { subnet = i; break; }
        if (is_addr && !subnet && i->ifa_netmask) {
            uint32_t m = ((struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr;
            if ((a.s_addr & m) == (want.s_addr & m)) subnet = i;
        }
    }
    if (!is_addr || !subnet) return -1;
    out->addr = want;
    snprintf(out->ifname, sizeof(out->ifname), "%s", subnet->ifa_name);
    return 0;
}

static int read_speed(const char *ifname)
{
    char path[96], buf[32];
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
    FILE *f = fopen(path, "re");
    int speed = -1;
    if (f) {
        if (fgets(buf, sizeof(buf), f)) speed = atoi(buf);
        fclose(f);
    }
    return speed > 0 && speed < 10000000 ? speed : 10000;
}

static int parse_groups(const char *spec, struct ifaddrs *ifs)
{
    char buf[1024];
    if (strlen(spec) >= sizeof(buf)) {
        FLEET_WARN("NET/fleet: FLEET_NET_IFACES is longer than %zu bytes", sizeof(buf) - 1);
        return -1;
    }
    snprintf(buf, sizeof(buf), "%s", spec);
    char *gsave = NULL;
    for (char *g = strtok_r(buf, ";", &gsave); g; g = strtok_r(NULL, ";", &gsave)) {
        if (fleet_cfg.ndevs == FLEET_MAX_DEVS) {
            FLEET_WARN("NET/fleet: FLEET_NET_IFACES has more than %d groups", FLEET_MAX_DEVS);
            return -1;
        }
        struct fleet_dev *d = &fleet_cfg.dev[fleet_cfg.ndevs];
        char *esave = NULL;
        for (char *e = strtok_r(g, ",", &esave); e; e = strtok_r(NULL, ",", &esave)) {
            while (*e == ' ') e++;
            if (d->npaths == FLEET_MAX_PATHS) {
                FLEET_WARN("NET/fleet: FLEET_NET_IFACES: a group has more than %d entries", FLEET_MAX_PATHS);
                return -1;
            }
            if (resolve(e, ifs, &d->path[d->npaths]) != 0) {
                FLEET_WARN("NET/fleet: FLEET_NET_IFACES: \"%.40s\" is no local interface with an IPv4 address", e);
                return -1;
            }
            d->npaths++;
        }
        if (d->npaths > 0) fleet_cfg.ndevs++;
    }
    return fleet_cfg.ndevs > 0 ? 0 : -1;
}

static int default_group(struct ifaddrs *ifs)
{
    struct fleet_dev *d = &fleet_cfg.dev[0];
    for (struct ifaddrs *i = ifs; i && d->npaths < FLEET_MAX_PATHS; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        if ((i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP)) continue;
        if (!valid_ifname(i->ifa_name)) continue;
        struct fleet_path_cfg *p = &d->path[d->npaths++];
        snprintf(p->ifname, sizeof(p->ifname), "%s", i->ifa_name);
        p->addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
    }
    if (d->npaths == 0) {
        FLEET_WARN("NET/fleet: no up IPv4 interface found; set FLEET_NET_IFACES");
        return -1;
    }
    fleet_cfg.ndevs = 1;
    return 0;
}

ncclResult_t fleet_config_load(void)
{
    memset(&fleet_cfg, 0, sizeof(fleet_cfg));
    int chunk_kb;
    if (env_int("FLEET_NET_HOLDDOWN_MS", 1000, 0, 600000, &fleet_cfg.holddown_ms) ||
        env_int("FLEET_NET_TIMEOUT_MS", 1000, 50, 600000, &fleet_cfg.user_timeout_ms) ||
        env_int("FLEET_NET_ACK_TIMEOUT_MS", 200, 20, 600000, &fleet_cfg.ack_timeout_ms) ||
        env_int("FLEET_NET_CONNECT_TIMEOUT_MS", 1000, 50, 600000, &fleet_cfg.connect_timeout_ms) ||
        env_int("FLEET_NET_HELLO_TIMEOUT_MS", 500, 10, 600000, &fleet_cfg.hello_timeout_ms) ||
        env_int("FLEET_NET_DEAD_GRACE_MS", 2000, 0, 600000, &fleet_cfg.dead_grace_ms) ||
        env_int("FLEET_NET_CHUNK_KB", 256, 4, 16384, &chunk_kb) ||
        env_path("FLEET_NET_LOG", "", fleet_cfg.log_path, sizeof(fleet_cfg.log_path)) ||
        env_path("FLEET_NET_COUNTERS_DIR", "", fleet_cfg.counters_dir, sizeof(fleet_cfg.counters_dir)))
        return ncclInvalidArgument;
    if (!getenv("FLEET_NET_COUNTERS_DIR"))   /* the default: this user's directory under /run/fleetctl */
        snprintf(fleet_cfg.counters_dir, sizeof(fleet_cfg.counters_dir), "/run/fleetctl/failover/%u",
                 (unsigned)geteuid());
    fleet_cfg.chunk = (uint32_t)chunk_kb * 1024u;

    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) {
        FLEET_WARN("NET/fleet: getifaddrs failed: %s", strerror(errno));
        return ncclSystemError;
    }
    const char *spec = getenv("FLEET_NET_IFACES");
    int rc = spec && *spec ? parse_groups(spec, ifs) : default_group(ifs);
    freeifaddrs(ifs);
    if (rc != 0) return ncclInvalidArgument;

    for (int d = 0; d < fleet_cfg.ndevs; d++) {
        struct fleet_dev *dev = &fleet_cfg.dev[d];
        char name[sizeof(dev->name)];   /* built apart: snprintf never reads what it writes */
        size_t used = (size_t)snprintf(name, sizeof(name), "fleet%d:", d);
        for (int p = 0; p < dev->npaths; p++) {
            dev->path[p].link = fleet_link_register(dev->path[p].ifname);
            if (dev->path[p].link < 0) return ncclInternalError;
            dev->speed_mbps += read_speed(dev->path[p].ifname);
            if (used < sizeof(name))
                used += (size_t)snprintf(name + used, sizeof(name) - used, "%s%s", p ? "+" : "", dev->path[p].ifname);
        }
        memcpy(dev->name, name, sizeof(name));
    }
    return ncclSuccess;
}
