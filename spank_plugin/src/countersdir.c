/* counters_dir=: see countersdir.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "countersdir.h"

static void mkdir_missing(const char *path)
{
    char buf[4096];
    int n = snprintf(buf, sizeof(buf), "%s", path);

    if (n < 0 || (size_t)n >= sizeof(buf))
        return;
    for (char *slash = strchr(buf + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = 0;
        mkdir(buf, 0755);
        *slash = '/';
    }
    mkdir(buf, 0755);
}

int fleet_counters_prepare(const char *base, uid_t uid, gid_t gid, char *out, size_t out_len, char *why,
                           size_t why_len)
{
    struct stat st;
    char name[24];
    int bfd = -1, ufd = -1, rv = -1;
    int n = snprintf(out, out_len, "%s/%u", base, (unsigned)uid);

    if (n < 0 || (size_t)n >= out_len) {
        snprintf(why, why_len, "path too long");
        return -1;
    }
    mkdir_missing(base);   /* what fails shows below */
    bfd = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (bfd < 0 || fstat(bfd, &st) != 0) {
        snprintf(why, why_len, "%s", strerror(errno));
        goto fail;
    }
    if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        snprintf(why, why_len, "must be owned by root and writable by nobody else");
        goto fail;
    }
    snprintf(name, sizeof(name), "%u", (unsigned)uid);
    if (mkdirat(bfd, name, 0755) != 0 && errno != EEXIST) {
        snprintf(why, why_len, "%s: %s", name, strerror(errno));
        goto fail;
    }
    if (fstatat(bfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
        snprintf(why, why_len, "%s: %s", name, S_ISLNK(st.st_mode) ? "a symbolic link" : "not a directory");
        goto fail;
    }
    ufd = openat(bfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (ufd < 0 || fstat(ufd, &st) != 0) {
        snprintf(why, why_len, "%s: %s", name, strerror(errno));
        goto fail;
    }
    if (st.st_uid != 0 && st.st_uid != uid) {
        snprintf(why, why_len, "%s: owned by uid %u", name, (unsigned)st.st_uid);
        goto fail;
    }
    if (fchown(ufd, uid, gid) != 0 || fchmod(ufd, 0755) != 0) {
        snprintf(why, why_len, "%s: %s", name, strerror(errno));
        goto fail;
    }
    rv = 0;
fail:
    if (ufd >= 0)
        close(ufd);
    if (bfd >= 0)
        close(bfd);
    return rv;
}
