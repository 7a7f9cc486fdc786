/* Interface up/down state for every interface a path uses. A NETLINK_ROUTE socket joined to
 * RTMGRP_LINK reports carrier and admin changes as they happen; the initial state, a resync after
 * a netlink overrun, and the fallback where netlink cannot be opened (polled every 50 ms) come
 * from the interface flags (IFF_UP and IFF_RUNNING, i.e. operstate up). */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sys/ioctl.h>
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
static uint64_t last_flags_poll;

/* Interface flags through an ioctl: unlike /sys (which shows the namespace it was mounted
 * in), this answers for the caller's own network namespace, e.g. under `nsenter --net`. */
static int flags_up(const char *name)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    int up = ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING);
    close(fd);
    return up;
}

int fleet_link_register(const char *ifname)
{
    for (int i = 0; i < nlinks; i++)
        if (strcmp(links[i].name, ifname) == 0) return i;
    if (nlinks == FLEET_MAX_LINKS) return -1;
    struct link *l = &links[nlinks];
    snprintf(l->name, sizeof(l->name), "%s", ifname);
    l->ifindex = if_nametoindex(ifname);
    l->up = flags_up(ifname);
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
                for (int i = 0; i < nlinks; i++) set_state(&links[i], flags_up(links[i].name), now);
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
    if (now - last_flags_poll < 50) return;
    last_flags_poll = now;
    for (int i = 0; i < nlinks; i++) set_state(&links[i], flags_up(links[i].name), now);
}

int fleet_link_up(int link, uint64_t *changed_ms)
{
    if (link < 0 || link >= nlinks) return 0;
    if (changed_ms) *changed_ms = links[link].changed_ms;
    return links[link].up;
}
