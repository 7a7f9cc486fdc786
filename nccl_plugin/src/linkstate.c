/* Interface up/down state for every interface a path uses. A NETLINK_ROUTE socket joined to
 * RTMGRP_LINK reports carrier and admin changes as they happen; where it cannot be opened,
 * /sys/class/net/<if>/operstate is polled every 50 ms instead. */
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fleet.h"

#define FLEET_MAX_LINKS (FLEET_MAX_DEVS * FLEET_MAX_PATHS)

struct link {
    char name[IF_NAMESIZE];
    unsigned ifindex;
    int up;
    uint64_t changed_ms;
};

static struct link links[FLEET_MAX_LINKS];
static int nlinks;
static int nl_fd = -1;
static uint64_t last_sysfs_poll;

static int sysfs_up(const char *name)
{
    char path[96], buf[32] = "";
    snprintf(path, sizeof(path), "/sys/class/net/%s/operstate", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    /* lo and some virtual devices report "unknown" while they carry traffic */
    return strncmp(buf, "up", 2) == 0 || strncmp(buf, "unknown", 7) == 0;
}

int fleet_link_register(const char *ifname)
{
    for (int i = 0; i < nlinks; i++)
        if (strcmp(links[i].name, ifname) == 0) return i;
    if (nlinks == FLEET_MAX_LINKS) return -1;
    struct link *l = &links[nlinks];
    snprintf(l->name, sizeof(l->name), "%s", ifname);
    l->ifindex = if_nametoindex(ifname);
    l->up = sysfs_up(ifname);
    l->changed_ms = 0;   /* "up since forever": no hold-down for a link that never changed */
    return nlinks++;
}

const char *fleet_link_name(int link)
{
    return link >= 0 && link < nlinks ? links[link].name : "?";
}

static void set_state(struct link *l, int up, uint64_t now)
{
    if (l->up == up) return;
    l->up = up;
    l->changed_ms = now;
    fleet_event(up ? "link_up" : "link_down", 0, -1, l->name, "netlink", 0);
}

void fleet_link_start(void)
{
    if (nl_fd >= 0) return;
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) return;
    struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = RTMGRP_LINK };
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) { close(fd); return; }
    nl_fd = fd;
}

static void netlink_drain(uint64_t now)
{
    /* aligned buffer for nlmsghdr; messages are bounded by the buffer and by NLMSG_OK */
    static uint64_t buf[2048];
    for (int rounds = 0; rounds < 64; rounds++) {
        ssize_t n = recv(nl_fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0) {
            if (errno == ENOBUFS) {   /* overrun: events lost, resynchronise from sysfs */
                for (int i = 0; i < nlinks; i++) set_state(&links[i], sysfs_up(links[i].name), now);
                continue;
            }
            return;
        }
        if (n == 0) return;
        size_t len = (size_t)n;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
            if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) continue;
            if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct ifinfomsg))) continue;
            struct ifinfomsg *ifi = NLMSG_DATA(h);
            for (int i = 0; i < nlinks; i++) {
                if (links[i].ifindex != (unsigned)ifi->ifi_index) continue;
                int up = h->nlmsg_type == RTM_NEWLINK && (ifi->ifi_flags & IFF_UP) &&
                         (ifi->ifi_flags & IFF_RUNNING);
                set_state(&links[i], up, now);
            }
        }
    }
}

void fleet_link_poll(uint64_t now)
{
    if (nl_fd >= 0) {
        netlink_drain(now);
        return;
    }
    if (now - last_sysfs_poll < 50) return;
    last_sysfs_poll = now;
    for (int i = 0; i < nlinks; i++) set_state(&links[i], sysfs_up(links[i].name), now);
}

int fleet_link_up(int link, uint64_t *changed_ms)
{
    if (link < 0 || link >= nlinks) return 0;
    if (changed_ms) *changed_ms = links[link].changed_ms;
    return links[link].up;
}
