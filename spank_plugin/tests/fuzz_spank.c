/* Fuzzer of spank_fleetctl: the plugin's own objects (every source file of src/, built with ASan and UBSan by
 * `make -C spank_plugin fuzz`) on the mock SPANK API, with a seeded PRNG so a failure replays.
 *
 *   fleet_fuzz_spank [--seconds S | --iterations N] [--seed N] [--status FILE] | --replay SEED
 *
 * Each iteration draws plugstack.conf arguments (known keys with good, bad, long, empty and
 * control-character values, unknown keys, random bytes), user options (--fleet-failover,
 * --fleet-lens, --fleet-snapshot), a context (srun, sbatch, slurmstepd), an env_file= text and a
 * counters_dir= state, and runs init, the option callbacks, init_post_opt and user_init.
 * Properties, against the rules of docs/failover.md written out again here:
 *   - init succeeds exactly when every argument is valid, and then holds the last value of each key;
 *   - an option callback succeeds exactly when its value is valid;
 *   - every error is one line starting "spank_fleetctl: " (no control character from a value);
 *   - the tasks get exactly the documented variables: the library only from plugin_dir, the
 *     env_file's variables exactly when it is valid, FLEET_NET_COUNTERS_DIR only for a prepared
 *     directory, nothing of failover when it is off; no value with a control character;
 *   - the env_file parser agrees with a separate reading of the same text, and its reason fits
 *     whatever buffer it is given;
 *   - a prepared counters directory is a real directory of the job's user under a base of root's.
 * Paths the plugin would create or open are confined to a temporary directory (removed at exit). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "countersdir.h"
#include "envfile.h"
#include "fleetctl.h"
#include "mock_spank.h"

#if defined(__has_include)
#if __has_include(<sanitizer/common_interface_defs.h>)
#include <sanitizer/common_interface_defs.h>
#define HAVE_SANITIZER 1
#endif
#endif

int slurm_spank_init(spank_t sp, int ac, char **av);
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av);
int slurm_spank_user_init(spank_t sp, int ac, char **av);

static uint64_t rng, iter_seed, iter_no;
static char tmp[256];   /* everything the plugin may create or open lives below it */
static int status_fd = -1;
static struct { long init_ok, init_refused, options, env_ok, env_refused, tasks_env, prepared, refused_dirs; } did;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t r64(void) { return splitmix(&rng); }
static uint32_t rn(uint32_t n) { return n ? (uint32_t)(r64() % n) : 0; }
static int chance(int pct) { return (int)rn(100) < pct; }

static void where(char *buf, size_t len)
{
    snprintf(buf, len, "fuzz_spank: iteration %llu, seed %llu; replay: fleet_fuzz_spank --replay %llu\n",
             (unsigned long long)iter_no, (unsigned long long)iter_seed, (unsigned long long)iter_seed);
}

static void report_where(void)
{
    char buf[256];
    where(buf, sizeof(buf));
    fputs(buf, stderr);
}

#define VIOL(...) do { fprintf(stderr, "VIOLATION: " __VA_ARGS__); fputc('\n', stderr); report_where(); exit(1); } while (0)

/* ---- values ---- */

static int path_ok(const char *s)   /* absolute, 1..1023 bytes, no control character */
{
    size_t n = strlen(s);
    if (n == 0 || n >= FLEET_PATH_MAX || s[0] != '/') return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return 0;
    return 1;
}

static int ifaces_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= FLEET_IFACES_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,;:-", s[i])) return 0;
    return 1;
}

static void random_text(char *out, size_t len, int printable)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = printable ? (unsigned char)(0x20 + rn(95)) : (unsigned char)(1 + rn(255));
        out[i] = (char)c;
    }
    out[len] = 0;
}

/* a value for any key: good ones of every kind, and bad ones */
static void value(char *out, size_t cap)
{
    static const char *const words[] = { "auto", "off", "yes", "no", "", "on", "AUTO", "1", "0", "eth0,eth1;eth2,eth3",
                                         "127.0.0.1,127.0.0.2", "eth0 eth1", "/", "//", "relative/dir", "-" };
    size_t n;
    switch (rn(8)) {
    case 0: snprintf(out, cap, "%s", words[rn(sizeof(words) / sizeof(words[0]))]); break;
    case 1: snprintf(out, cap, "%s/v%u", tmp, rn(100)); break;                    /* a good path */
    case 2:                                                                         /* long paths */
        n = 1000 + rn(40);
        if (n >= cap) n = cap - 1;
        out[0] = '/';
        for (size_t i = 1; i < n; i++) out[i] = (char)('a' + rn(26));
        out[n] = 0;
        break;
    case 3: snprintf(out, cap, "%s/v%c%u", tmp, (char[]){ '\n', '\t', '\x1b', '\x7f', '\r' }[rn(5)], rn(10)); break;
    case 4: n = rn(300); if (n >= cap) n = cap - 1; random_text(out, n, 1); break;
    case 5: n = rn(80); if (n >= cap) n = cap - 1; random_text(out, n, 0); break;
    case 6: n = rn(300); if (n >= cap) n = cap - 1;                                 /* interface lists */
        for (size_t i = 0; i < n; i++) out[i] = "eth01,;:._-ABZ"[rn(14)];
        out[n] = 0;
        break;
    default: snprintf(out, cap, "%s/c%u", tmp, rn(3)); break;
    }
}

/* mostly a good value for that key, else any value */
static void value_for(const char *key, char *out, size_t cap)
{
    if (chance(40)) { value(out, cap); return; }
    if (!strcmp(key, "plugin_dir") || !strcmp(key, "env_file")) snprintf(out, cap, "%s/v%u", tmp, rn(20));
    else if (!strcmp(key, "counters_dir")) snprintf(out, cap, chance(20) ? "off" : "%s/c%u", tmp, rn(3));
    else if (!strcmp(key, "ifaces")) snprintf(out, cap, "%s", chance(50) ? "eth0,eth1;eth2,eth3" : "127.0.0.1,127.0.0.2");
    else if (!strcmp(key, "default")) snprintf(out, cap, "%s", chance(50) ? "auto" : "off");
    else snprintf(out, cap, "%s", chance(50) ? "yes" : "no");
}

/* what the plugin may open or create stays under tmp */
static void confine(char *arg, size_t cap)
{
    static const char *const keys[] = { "env_file=", "counters_dir=" };
    for (size_t k = 0; k < 2; k++) {
        size_t kl = strlen(keys[k]);
        size_t tl = strlen(tmp);
        const char *v = arg + kl;
        if (strncmp(arg, keys[k], kl) == 0 && v[0] == '/' &&
            (strncmp(v, tmp, tl) != 0 || v[tl] != '/' || strstr(v, "/..") != NULL))
            snprintf(arg + kl, cap - kl, "%s/x", tmp);
    }
}

/* ---- the env_file reader, against a reading of the documented rules ---- */

struct oracle_env { int n; char name[FLEET_ENV_MAX_VARS][80]; char value[FLEET_ENV_MAX_VARS][1100]; };

static int oracle_env(const char *text, size_t len, struct oracle_env *o)
{
    o->n = 0;
    size_t pos = 0;
    while (pos < len) {
        size_t end = pos;
        while (end < len && text[end] != '\n') end++;
        size_t n = end - pos;
        const char *line = text + pos;
        pos = end + 1;
        if (n == 0 || line[0] == '#') continue;
        const char *eq = memchr(line, '=', n);
        if (!eq) return -1;
        size_t nl = (size_t)(eq - line), vl = n - nl - 1;
        size_t prefix = nl > 5 && !strncmp(line, "NCCL_", 5) ? 5 : nl > 10 && !strncmp(line, "FLEET_NET_", 10) ? 10 : 0;
        if (!prefix || nl > FLEET_ENV_NAME_MAX || vl > FLEET_ENV_VALUE_MAX) return -1;
        for (size_t i = prefix; i < nl; i++)
            if (!((line[i] >= 'A' && line[i] <= 'Z') || (line[i] >= '0' && line[i] <= '9') || line[i] == '_')) return -1;
        for (size_t i = 0; i < vl; i++)
            if (!eq[1 + i] || !strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,;:/=+-", eq[1 + i]))
                return -1;
        if (o->n == FLEET_ENV_MAX_VARS) return -1;
        memcpy(o->name[o->n], line, nl);
        o->name[o->n][nl] = 0;
        memcpy(o->value[o->n], eq + 1, vl);
        o->value[o->n][vl] = 0;
        o->n++;
    }
    return 0;
}

static size_t env_text(char *out, size_t cap)
{
    static const char *const names[] = { "NCCL_NET", "NCCL_NET_PLUGIN", "FLEET_NET_IFACES", "FLEET_NET_COUNTERS_DIR",
                                         "NCCL_IB_RESILIENCY_PORT_FAILOVER", "LD_PRELOAD", "NCCL_", "nccl_net",
                                         "FLEET_NET_", "NCCL_X Y", "PATH" };
    size_t len = 0;
    int lines = (int)rn(chance(3) ? 80 : 8);
    for (int l = 0; l < lines && len + 1300 < cap; l++) {
        char v[1100];
        size_t vn;
        switch (rn(6)) {
        case 0: len += (size_t)snprintf(out + len, cap - len, "# comment %u\n", rn(100)); continue;
        case 1: out[len++] = '\n'; continue;
        case 2: vn = rn(chance(5) ? 1100 : 40); random_text(v, vn, 0); break;
        default:
            vn = chance(3) ? 1024 + rn(3) : rn(40);
            for (size_t i = 0; i < vn; i++) v[i] = "abcXYZ019_.,;:/=+-"[rn(18)];
            v[vn] = 0;
        }
        const char *name = names[rn(chance(80) ? 5 : sizeof(names) / sizeof(names[0]))];
        char longname[80];
        if (chance(5)) { size_t k = 60 + rn(10); memset(longname, 'A', k); memcpy(longname, "NCCL_", 5); longname[k] = 0; name = longname; }
        len += (size_t)snprintf(out + len, cap - len, "%s%s%.*s%s", name, chance(95) ? "=" : "", (int)vn, v,
                                chance(97) ? "\n" : (chance(50) ? "\r\n" : ""));
        if (len >= cap) len = cap - 1;
    }
    if (chance(5) && len + 2 < cap) { out[len++] = 0; out[len++] = 'x'; }   /* a NUL inside */
    return len;
}

static void fuzz_envfile(void)
{
    static char text[80000];
    static struct fleet_env env;
    static struct oracle_env want;
    size_t len = env_text(text, sizeof(text));
    char why[300];
    size_t why_len = chance(30) ? 1 + rn(24) : sizeof(why) - 32;
    memset(why, 0x5a, sizeof(why));
    int rc = fleet_env_parse(text, len, &env, why, why_len);
    int orc = oracle_env(text, len, &want);
    if (rc != orc) VIOL("env_file parser said %d, the rules say %d (%zu bytes)", rc, orc, len);
    if (rc == 0) {
        did.env_ok++;
        if (env.n != want.n) VIOL("env_file parser read %d variables, the rules %d", env.n, want.n);
        for (int i = 0; i < env.n; i++)
            if (strcmp(env.name[i], want.name[i]) || strcmp(env.value[i], want.value[i]))
                VIOL("env_file variable %d: %s=%.40s, the rules say %s=%.40s", i, env.name[i], env.value[i],
                     want.name[i], want.value[i]);
    } else {
        did.env_refused++;
        if (!memchr(why, 0, why_len)) VIOL("the env_file reason is not terminated within its %zu bytes", why_len);
        for (size_t i = why_len; i < sizeof(why); i++)
            if (why[i] != 0x5a) VIOL("the env_file reason wrote past its %zu bytes", why_len);
        if (why_len > 8 && strncmp(why, "line ", 5) != 0) VIOL("the env_file reason does not name the line: %s", why);
    }
}

/* ---- counters_dir ---- */

static void fuzz_countersdir(void)
{
    char base[512], dir[600], out[1100], why[256];
    snprintf(base, sizeof(base), "%s/c%u%s", tmp, rn(3), chance(20) ? "/deeper" : "");
    uid_t uid = chance(30) ? 65534 : chance(30) ? 0 : (uid_t)rn(100000);
    gid_t gid = (gid_t)rn(100000);
    char parent[512];
    snprintf(parent, sizeof(parent), "%s", base);
    *strrchr(parent, '/') = 0;
    mkdir(parent, 0755);
    switch (rn(6)) {   /* what may already be there */
    case 0: mkdir(base, 0777); chmod(base, 0777); break;
    case 1:
        mkdir(base, 0755);
        snprintf(dir, sizeof(dir), "%s/%u", base, (unsigned)uid);
        if (symlink(tmp, dir) != 0 && errno != EEXIST && errno != ENOTDIR) VIOL("symlink %s: %s", dir, strerror(errno));
        break;
    case 2:
        mkdir(base, 0755);
        snprintf(dir, sizeof(dir), "%s/%u", base, (unsigned)uid);
        mkdir(dir, 0700);
        if (lchown(dir, uid + 1, gid) != 0 && errno != ENOENT && errno != ENOTDIR) VIOL("lchown %s: %s", dir, strerror(errno));
        break;
    default: break;
    }
    int rc = fleet_counters_prepare(base, uid, gid, out, sizeof(out), why, sizeof(why));
    struct stat st, bst;
    snprintf(dir, sizeof(dir), "%s/%u", base, (unsigned)uid);
    if (rc == 0) {
        did.prepared++;
        if (strcmp(out, dir)) VIOL("counters_dir prepared %s, not %s", out, dir);
        if (lstat(out, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != uid || st.st_gid != gid ||
            (st.st_mode & 07777) != 0755)
            VIOL("counters_dir %s is not a 0755 directory of %u:%u", out, (unsigned)uid, (unsigned)gid);
        if (lstat(base, &bst) != 0 || !S_ISDIR(bst.st_mode) || bst.st_uid != 0 || (bst.st_mode & 022))
            VIOL("counters_dir base %s accepted though not root's alone", base);
    } else {
        did.refused_dirs++;
        if (!memchr(why, 0, sizeof(why)) || !why[0]) VIOL("counters_dir refused without a reason");
    }
    /* start over now and then: the planted states above need a fresh tree */
    if (chance(10)) {
        char cmd[900];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'/c0 '%s'/c1 '%s'/c2", tmp, tmp, tmp);
        if (system(cmd) != 0) VIOL("cleanup");
    }
}

/* ---- the plugin's entry points ---- */

static void check_errors(void)
{
    for (int i = 0; i < mock.ncalls; i++) {
        const struct mock_call *c = &mock.call[i];
        if (c->kind == MOCK_ERROR) {
            if (strncmp(c->value, "spank_fleetctl: ", 16) != 0) VIOL("an error without the plugin's prefix: %.80s", c->value);
            for (const char *p = c->value; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                    VIOL("an error message carries control character 0x%02x: %.120s", (unsigned char)*p, c->value);
        } else if (c->kind != MOCK_UNSETENV) {
            for (const char *p = c->value; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f) VIOL("%s=%.60s carries a control character", c->name, c->value);
        }
    }
    if (mock.overflow) VIOL("more than %d calls", MOCK_MAX_CALLS);
}

static int count(enum mock_kind kind)
{
    int n = 0;
    for (int i = 0; i < mock.ncalls; i++) n += mock.call[i].kind == kind;
    return n;
}

static const char *set_value(enum mock_kind kind, const char *name)
{
    const char *v = NULL;
    for (int i = 0; i < mock.ncalls; i++)
        if (mock.call[i].kind == kind && !strcmp(mock.call[i].name, name)) v = mock.call[i].value;
    return v;
}

struct expect {
    char plugin_dir[FLEET_PATH_MAX], env_file[FLEET_PATH_MAX], ifaces[FLEET_IFACES_MAX], counters_dir[FLEET_PATH_MAX];
    int failover_off, allow_off, required;
};

static int oracle_arg(const char *arg, struct expect *e)
{
    const char *eq = strchr(arg, '=');
    if (!eq) return -1;
    size_t kl = (size_t)(eq - arg);
    const char *v = eq + 1;
#define KEY(k) (kl == strlen(k) && !strncmp(arg, k, kl))
    if (KEY("plugin_dir")) { if (!path_ok(v)) return -1; snprintf(e->plugin_dir, sizeof(e->plugin_dir), "%s", v); }
    else if (KEY("env_file")) { if (!path_ok(v)) return -1; snprintf(e->env_file, sizeof(e->env_file), "%s", v); }
    else if (KEY("counters_dir")) {
        if (!strcmp(v, "off")) e->counters_dir[0] = 0;
        else if (!path_ok(v) || strlen(v) > FLEET_PATH_MAX - 16) return -1;
        else snprintf(e->counters_dir, sizeof(e->counters_dir), "%s", v);
    } else if (KEY("ifaces")) { if (!ifaces_ok(v)) return -1; snprintf(e->ifaces, sizeof(e->ifaces), "%s", v); }
    else if (KEY("default")) { if (strcmp(v, "auto") && strcmp(v, "off")) return -1; e->failover_off = !strcmp(v, "off"); }
    else if (KEY("allow_off")) { if (strcmp(v, "yes") && strcmp(v, "no")) return -1; e->allow_off = !strcmp(v, "yes"); }
    else if (KEY("required")) { if (strcmp(v, "yes") && strcmp(v, "no")) return -1; e->required = !strcmp(v, "yes"); }
    else return -1;
#undef KEY
    return 0;
}

static void fuzz_plugin(void)
{
    static char argbuf[8][1200];
    static char text[80000];
    char *av[8];
    int ac = (int)rn(7);
    static const char *const keys[] = { "plugin_dir", "env_file", "ifaces", "counters_dir", "default", "allow_off",
                                        "required", "plugin_dirx", "PLUGIN_DIR", "", "ifaces ", "env" };
    for (int i = 0; i < ac; i++) {
        char v[1100];
        if (chance(90)) {
            const char *key = keys[rn(chance(90) ? 7 : 12)];
            value_for(key, v, sizeof(v));
            snprintf(argbuf[i], sizeof(argbuf[i]), "%s%s%s", key, chance(97) ? "=" : "", v);
        } else {
            random_text(argbuf[i], rn(100), chance(50));
        }
        if (chance(5) && argbuf[i][0]) argbuf[i][rn((uint32_t)strlen(argbuf[i]))] ^= (char)(1 << rn(7));
        if (!argbuf[i][0] && chance(50)) snprintf(argbuf[i], sizeof(argbuf[i]), "=");
        confine(argbuf[i], sizeof(argbuf[i]));
        av[i] = argbuf[i];
    }
    /* an env_file under tmp, when one is named */
    size_t tlen = env_text(text, sizeof(text));
    for (int i = 0; i < ac; i++) {
        if (strncmp(av[i], "env_file=", 9) || !path_ok(av[i] + 9)) continue;
        int fd = open(av[i] + 9, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) { if (write(fd, text, tlen) < 0) VIOL("write"); fchmod(fd, chance(90) ? 0644 : 0666); close(fd); }
    }
    spank_context_t ctx = (spank_context_t[]){ S_CTX_LOCAL, S_CTX_ALLOCATOR, S_CTX_REMOTE, S_CTX_REMOTE }[rn(4)];
    mock_reset(ctx);
    mock.uid = chance(50) ? 65534 : (uid_t)rn(100000);
    mock.gid = (gid_t)rn(100000);
    struct expect e = { .allow_off = 1 };
    snprintf(e.plugin_dir, sizeof(e.plugin_dir), "%s", FLEET_DEFAULT_PLUGIN_DIR);
    snprintf(e.counters_dir, sizeof(e.counters_dir), "%s", FLEET_DEFAULT_COUNTERS_DIR);
    int ok = 1;
    for (int i = 0; i < ac && ok; i++) ok = oracle_arg(av[i], &e) == 0;
    int rc = slurm_spank_init(NULL, ac, av);
    check_errors();
    if ((rc == 0) != ok) VIOL("init returned %d, the rules say %s (first argument %.60s)", rc, ok ? "valid" : "invalid",
                              ac ? av[0] : "");
    if (rc != 0) {
        did.init_refused++;
        if (count(MOCK_ERROR) != 1) VIOL("a refused plugstack line gave %d errors", count(MOCK_ERROR));
        return;
    }
    did.init_ok++;
    if (strcmp(fleet_config.plugin_dir, e.plugin_dir) || strcmp(fleet_config.env_file, e.env_file) ||
        strcmp(fleet_config.ifaces, e.ifaces) || strcmp(fleet_config.counters_dir, e.counters_dir) ||
        (fleet_config.default_failover == FLEET_FAILOVER_OFF) != e.failover_off ||
        fleet_config.allow_off != e.allow_off || fleet_config.required != e.required)
        VIOL("init kept settings other than the arguments'");
    /* the user's options, as srun or slurmstepd hands them over */
    int off = e.failover_off, lens = 0, opt_failed = 0;
    char snapshot[FLEET_PATH_MAX] = "";
    for (int k = (int)rn(4); k > 0; k--) {
        const char *names[] = { "fleet-failover", "fleet-lens", "fleet-snapshot" };
        const char *name = names[rn(3)];
        const struct spank_option *o = mock_option(name);
        if (!o) VIOL("option --%s not registered", name);
        char v[1100];
        if (chance(50)) value(v, sizeof(v));
        else snprintf(v, sizeof(v), "%s", !strcmp(name, "fleet-snapshot") ? "/scratch/snap" : chance(50) ? "auto" : "off");
        const char *arg = chance(10) ? NULL : v;
        int before = count(MOCK_ERROR);
        int orc = o->cb(o->val, arg, ctx == S_CTX_REMOTE);
        int good;
        if (!strcmp(name, "fleet-failover")) {
            good = !arg || !strcmp(arg, "auto") || (!strcmp(arg, "off") && e.allow_off);
            if (good) off = arg && !strcmp(arg, "off");
        } else if (!strcmp(name, "fleet-lens")) {
            good = 1;
            lens = 1;
        } else {
            good = arg && path_ok(arg);
            if (good) memcpy(snapshot, arg, strlen(arg) + 1);   /* path_ok: < FLEET_PATH_MAX */
        }
        if ((orc == 0) != good) VIOL("--%s=%.60s returned %d", name, arg ? arg : "(none)", orc);
        if (!good && count(MOCK_ERROR) != before + 1) VIOL("--%s refused without one error", name);
        opt_failed |= !good;
        did.options++;
        check_errors();
    }
    if (opt_failed) return;   /* Slurm stops at a refused option */
    mock.fail_setenv = chance(5);
    int post = slurm_spank_init_post_opt(NULL, ac, av);
    int user = ctx == S_CTX_REMOTE ? slurm_spank_user_init(NULL, ac, av) : 0;
    check_errors();
    int errors = count(MOCK_ERROR);
    if ((post || user) && !e.required) VIOL("a plugin error failed the job without required=yes");
    if ((post || user) && !errors) VIOL("the job failed without an error");
    if (mock.fail_setenv) return;
    if (ctx != S_CTX_REMOTE) {
        if (count(MOCK_SETENV) || count(MOCK_UNSETENV)) VIOL("srun/sbatch touched the tasks' environment");
        const char *f = set_value(MOCK_JOB_CONTROL, "FLEET_FAILOVER");
        if (!f || strcmp(f, off ? "off" : "auto")) VIOL("SPANK_FLEET_FAILOVER=%s, want %s", f ? f : "(unset)", off ? "off" : "auto");
        if (!!set_value(MOCK_JOB_CONTROL, "FLEET_LENS") != lens) VIOL("FLEET_LENS");
        const char *s = set_value(MOCK_JOB_CONTROL, "FLEET_SNAPSHOT");
        if (snapshot[0] ? !s || strcmp(s, snapshot) : s != NULL) VIOL("FLEET_SNAPSHOT");
        return;
    }
    did.tasks_env++;
    if (count(MOCK_JOB_CONTROL)) VIOL("slurmstepd set the job control environment");
    const char *snap = set_value(MOCK_SETENV, "FLEET_SNAPSHOT_DIR");
    if (snapshot[0] ? !snap || strcmp(snap, snapshot) : snap != NULL) VIOL("FLEET_SNAPSHOT_DIR");
    if (off) {
        if (count(MOCK_SETENV) != (snapshot[0] ? 1 : 0) || count(MOCK_UNSETENV)) VIOL("failover off, yet variables set");
        return;
    }
    char counters[FLEET_PATH_MAX + 16] = "";
    int prep_failed = 0;
    for (int i = 0; i < mock.ncalls; i++)
        prep_failed |= mock.call[i].kind == MOCK_ERROR && strstr(mock.call[i].value, ": counters_dir=") != NULL;
    if (e.counters_dir[0] && !prep_failed) snprintf(counters, sizeof(counters), "%s/%u", e.counters_dir, (unsigned)mock.uid);
    const char *cset = set_value(MOCK_SETENV, "FLEET_NET_COUNTERS_DIR");
    if (e.env_file[0]) {
        /* exactly the file's variables, when the file is valid (and safe) */
        struct oracle_env want;
        int fd = open(e.env_file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        int usable = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 &&
                     !(st.st_mode & 022) && st.st_size <= FLEET_ENV_MAX_BYTES;
        size_t len = 0;
        if (usable) { ssize_t n = read(fd, text, sizeof(text)); len = n > 0 ? (size_t)n : 0; }
        if (fd >= 0) close(fd);
        if (!usable || oracle_env(text, len, &want) != 0) {
            if (!user) { if (e.required) VIOL("a bad env_file passed with required=yes"); }
            if (!errors) VIOL("a bad env_file without an error");
            return;
        }
        for (int i = 0; i < want.n; i++) {
            const char *v = set_value(MOCK_SETENV, want.name[i]);
            if (!v) VIOL("env_file variable %s not set", want.name[i]);
        }
        int has_counters = 0, has_plugin = 0;
        for (int i = 0; i < want.n; i++) {
            has_counters |= !strcmp(want.name[i], "FLEET_NET_COUNTERS_DIR");
            has_plugin |= !strcmp(want.name[i], "NCCL_NET_PLUGIN");
        }
        if (count(MOCK_SETENV) != want.n + (snapshot[0] ? 1 : 0) + (counters[0] && !has_counters ? 1 : 0))
            VIOL("the tasks got %d variables, the env_file has %d", count(MOCK_SETENV), want.n);
        if (!has_counters && (counters[0] ? !cset || strcmp(cset, counters) : cset != NULL))
            VIOL("FLEET_NET_COUNTERS_DIR=%s with an env_file", cset ? cset : "(unset)");
        if (!has_plugin && (!set_value(MOCK_UNSETENV, "NCCL_NET_PLUGIN") && !set_value(MOCK_SETENV, "NCCL_NET_PLUGIN")))
            VIOL("a user's NCCL_NET_PLUGIN survives an env_file without one");
        return;
    }
    char lib[FLEET_PATH_MAX + 32];
    snprintf(lib, sizeof(lib), "%s/%s", e.plugin_dir, FLEET_LIB);
    const char *p = set_value(MOCK_SETENV, "NCCL_NET_PLUGIN"), *n = set_value(MOCK_SETENV, "NCCL_NET");
    if (!p || strcmp(p, lib) || !n || strcmp(n, "fleet")) VIOL("NCCL_NET_PLUGIN=%s NCCL_NET=%s", p ? p : "-", n ? n : "-");
    const char *ifs = set_value(MOCK_SETENV, "FLEET_NET_IFACES");
    if (e.ifaces[0] ? !ifs || strcmp(ifs, e.ifaces) : ifs != NULL) VIOL("FLEET_NET_IFACES");
    if (counters[0] ? !cset || strcmp(cset, counters) : cset != NULL)
        VIOL("FLEET_NET_COUNTERS_DIR=%s, want %s", cset ? cset : "(unset)", counters[0] ? counters : "(unset)");
}

static void run_one(uint64_t seed)
{
    char buf[256];
    iter_seed = rng = seed;
    if (status_fd >= 0) {
        where(buf, sizeof(buf));
        size_t n = strlen(buf);
        memset(buf + n, ' ', sizeof(buf) - n);
        buf[sizeof(buf) - 1] = '\n';
        if (pwrite(status_fd, buf, sizeof(buf), 0) < 0) status_fd = -1;
    }
    uint32_t a = rn(10);
    if (a < 6) fuzz_plugin();
    else if (a < 9) fuzz_envfile();
    else if (geteuid() == 0) fuzz_countersdir();
}

static void cleanup(void)
{
    char cmd[300];
    if (!tmp[0]) return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_spank: could not remove %s\n", tmp);
    tmp[0] = 0;
}

static void on_death(void)
{
    fprintf(stderr, "fuzz_spank: a sanitizer stopped the run\n");
    report_where();
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double seconds = 0;
    long iterations = 0;
    uint64_t seed = 1, replay = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--iterations")) iterations = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) seed = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--replay")) replay = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--status")) status_fd = open(argv[i + 1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        else { fprintf(stderr, "usage: fleet_fuzz_spank [--seconds S | --iterations N] [--seed N] [--status FILE] | --replay SEED\n"); return 2; }
    }
    if (argc % 2 == 0) { fprintf(stderr, "fleet_fuzz_spank: an option without its value\n"); return 2; }
    if (!seconds && !iterations) iterations = 2000;
    snprintf(tmp, sizeof(tmp), "/tmp/fleet-fuzz-spank-XXXXXX");
    if (!mkdtemp(tmp) || chmod(tmp, 0755) != 0) { perror("mkdtemp"); return 2; }
    atexit(cleanup);   /* a violation exits too */
    mock.quiet = 1;
#ifdef HAVE_SANITIZER
    __sanitizer_set_death_callback(on_death);
#else
    (void)on_death;
#endif
    if (replay) {
        run_one(replay);
        printf("fuzz_spank: replayed seed %llu: no violation\n", (unsigned long long)replay);
    } else {
        uint64_t s = seed;
        double end = now_s() + seconds;
        for (iter_no = 0; seconds ? now_s() < end : (long)iter_no < iterations; iter_no++) run_one(splitmix(&s));
        printf("fuzz_spank: seed %llu: %llu iterations, no violation: plugstack lines %ld accepted, %ld refused; "
               "%ld option values; %ld tasks' environments; env_file texts %ld read, %ld refused; counters "
               "directories %ld prepared, %ld refused\n", (unsigned long long)seed, (unsigned long long)iter_no,
               did.init_ok, did.init_refused, did.options, did.tasks_env, did.env_ok, did.env_refused, did.prepared,
               did.refused_dirs);
    }
    return 0;
}
