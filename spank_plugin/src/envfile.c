/* env_file= of plugstack.conf: see envfile.h. Names must be NCCL_* or FLEET_NET_* (nothing else a
 * job's loader or shell would act on), values a conservative character set; one bad line refuses
 * the whole file, so a job never runs on half of it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envfile.h"

static int name_ok(const char *s, size_t n)
{
    size_t prefix;

    if (n > 5 && strncmp(s, "NCCL_", 5) == 0)
        prefix = 5;
    else if (n > 10 && strncmp(s, "FLEET_NET_", 10) == 0)
        prefix = 10;
    else
        return 0;
    if (n > FLEET_ENV_NAME_MAX)
        return 0;
    for (size_t i = prefix; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return 0;
    return 1;
}

static int value_ok(const char *s, size_t n)
{
    if (n > FLEET_ENV_VALUE_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!s[i] || !strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,;:/=+-", s[i]))
            return 0;
    return 1;
}

int fleet_env_parse(const char *text, size_t len, struct fleet_env *env, char *why, size_t why_len)
{
    size_t pos = 0;
    int line = 0;

    memset(env, 0, sizeof(*env));
    while (pos < len) {
        const char *start = text + pos;
        const char *nl = memchr(start, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - start) : len - pos;
        const char *eq;

        pos += n + (nl ? 1 : 0);
        line++;
        if (n == 0 || start[0] == '#')
            continue;
        eq = memchr(start, '=', n);
        if (!eq || !name_ok(start, (size_t)(eq - start)) || !value_ok(eq + 1, n - (size_t)(eq - start) - 1)) {
            snprintf(why, why_len, "line %d: expected NCCL_*=VALUE or FLEET_NET_*=VALUE", line);
            return -1;
        }
        if (env->n >= FLEET_ENV_MAX_VARS) {
            snprintf(why, why_len, "line %d: more than %d variables", line, FLEET_ENV_MAX_VARS);
            return -1;
        }
        memcpy(env->name[env->n], start, (size_t)(eq - start));
        memcpy(env->value[env->n], eq + 1, n - (size_t)(eq - start) - 1);
        env->n++;
    }
    return 0;
}

int fleet_env_load(const char *path, struct fleet_env *env, char *why, size_t why_len)
{
    static char buf[FLEET_ENV_MAX_BYTES + 1];
    struct stat st;
    ssize_t got = 0;
    size_t len = 0;
    int rv = -1;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);

    if (fd < 0) {
        snprintf(why, why_len, "%s", strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(why, why_len, "not a regular file");
        goto fail;
    }
    if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        snprintf(why, why_len, "must be owned by root and writable by nobody else");
        goto fail;
    }
    while (len <= FLEET_ENV_MAX_BYTES && (got = read(fd, buf + len, FLEET_ENV_MAX_BYTES + 1 - len)) > 0)
        len += (size_t)got;
    if (got < 0) {
        snprintf(why, why_len, "%s", strerror(errno));
        goto fail;
    }
    if (len > FLEET_ENV_MAX_BYTES) {
        snprintf(why, why_len, "larger than %d bytes", FLEET_ENV_MAX_BYTES);
        goto fail;
    }
    rv = fleet_env_parse(buf, len, env, why, why_len);
fail:
    close(fd);
    return rv;
}
