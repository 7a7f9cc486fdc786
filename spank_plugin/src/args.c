/* plugstack.conf arguments: `key=value` words parsed into fleet_config; an unknown key is fatal. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "countersdir.h"
#include "fleetctl.h"

int fleet_path_valid(const char *path)
{
    size_t n = strnlen(path, FLEET_PATH_MAX);

    if (n == 0 || n >= FLEET_PATH_MAX || path[0] != '/')
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
            return 0;
    return 1;
}

const char *fleet_shown(const char *value, char *buf, size_t len)
{
    size_t n = 0;

    for (; value[n] && n + 4 < len; n++)
        buf[n] = ((unsigned char)value[n] < 0x20 || value[n] == 0x7f) ? '?' : value[n];
    if (value[n]) {
        strcpy(buf + (n < len - 4 ? n : len - 4), "...");
        return buf;
    }
    buf[n] = 0;
    return buf;
}

static int ifaces_valid(const char *s)
{
    size_t n = strnlen(s, FLEET_IFACES_MAX);

    if (n == 0 || n >= FLEET_IFACES_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,;:-", s[i]))
            return 0;
    return 1;
}

static int yes_no(const char *key, const char *value, int *out)
{
    char shown[FLEET_SHOWN];

    if (strcmp(value, "yes") == 0)
        *out = 1;
    else if (strcmp(value, "no") == 0)
        *out = 0;
    else {
        slurm_error("spank_fleetctl: config: %s=%s: %s", key, fleet_shown(value, shown, sizeof(shown)),
                    "expected yes or no");
        return -1;
    }
    return 0;
}

static int parse_one(const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t klen = eq ? (size_t)(eq - arg) : 0;
    const char *value = eq ? eq + 1 : "";
    char shown[FLEET_SHOWN], key[FLEET_SHOWN];

    fleet_shown(value, shown, sizeof(shown));
    if (!eq) {
        slurm_error("spank_fleetctl: config: %s: %s", fleet_shown(arg, key, sizeof(key)), "expected key=value");
        return -1;
    }
    if (klen == 10 && strncmp(arg, "plugin_dir", klen) == 0) {
        if (!fleet_path_valid(value)) {
            slurm_error("spank_fleetctl: config: plugin_dir=%s: %s", shown,
                        "not an absolute path of at most 1023 characters");
            return -1;
        }
        strcpy(fleet_config.plugin_dir, value);   /* length checked above */
    } else if (klen == 8 && strncmp(arg, "env_file", klen) == 0) {
        if (!fleet_path_valid(value)) {
            slurm_error("spank_fleetctl: config: env_file=%s: %s", shown,
                        "not an absolute path of at most 1023 characters");
            return -1;
        }
        strcpy(fleet_config.env_file, value);   /* length checked above */
    } else if (klen == 12 && strncmp(arg, "counters_dir", klen) == 0) {
        if (strcmp(value, "off") == 0) {
            fleet_config.counters_dir[0] = 0;
        } else if (!fleet_path_valid(value) || strlen(value) > FLEET_PATH_MAX - 16) {
            slurm_error("spank_fleetctl: config: counters_dir=%s: %s", shown,
                        "not \"off\" or an absolute path of at most 1007 characters");
            return -1;
        } else {
            strcpy(fleet_config.counters_dir, value);   /* length checked above */
        }
    } else if (klen == 6 && strncmp(arg, "ifaces", klen) == 0) {
        if (!ifaces_valid(value)) {
            slurm_error("spank_fleetctl: config: ifaces=%s: %s", shown,
                        "expected interface names or addresses separated by , and ;");
            return -1;
        }
        strcpy(fleet_config.ifaces, value);
    } else if (klen == 7 && strncmp(arg, "default", klen) == 0) {
        if (strcmp(value, "auto") == 0)
            fleet_config.default_failover = FLEET_FAILOVER_AUTO;
        else if (strcmp(value, "off") == 0)
            fleet_config.default_failover = FLEET_FAILOVER_OFF;
        else {
            slurm_error("spank_fleetctl: config: default=%s: %s", shown, "expected auto or off");
            return -1;
        }
    } else if (klen == 9 && strncmp(arg, "allow_off", klen) == 0) {
        return yes_no("allow_off", value, &fleet_config.allow_off);
    } else if (klen == 8 && strncmp(arg, "required", klen) == 0) {
        return yes_no("required", value, &fleet_config.required);
    } else {
        snprintf(key, sizeof(key), "%.*s", (int)(klen < sizeof(key) ? klen : sizeof(key) - 1), arg);
        slurm_error("spank_fleetctl: config: %s: %s", fleet_shown(key, shown, sizeof(shown)),
                    "unknown key (plugin_dir, ifaces, env_file, counters_dir, default, allow_off, required)");
        return -1;
    }
    return 0;
}

int fleet_config_parse(int ac, char **av)
{
    memset(&fleet_config, 0, sizeof(fleet_config));
    memset(&fleet_choice, 0, sizeof(fleet_choice));
    strcpy(fleet_config.plugin_dir, FLEET_DEFAULT_PLUGIN_DIR);
    strcpy(fleet_config.counters_dir, FLEET_DEFAULT_COUNTERS_DIR);
    fleet_config.default_failover = FLEET_FAILOVER_AUTO;
    fleet_config.allow_off = 1;
    fleet_config.required = 0;
    for (int i = 0; i < ac; i++)
        if (parse_one(av[i]) != 0)
            return -1;
    return 0;
}

int fleet_result(int rv)
{
    return (rv != 0 && fleet_config.required) ? -1 : 0;
}
