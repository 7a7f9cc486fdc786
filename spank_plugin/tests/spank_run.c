/* Runs spank_fleetctl's entry points in one context, on the mock SPANK API (mock_spank.c):
 *
 *   spank_run local|remote|allocator [--uid N --gid N] [--opt NAME[=VALUE]]... -- PLUGSTACK_ARGS...
 *
 * init (plugstack arguments), the option callbacks, init_post_opt and, in remote, user_init, as
 * slurmstepd or srun would call them. Prints what the plugin did, one line each: `setenv N=V`,
 * `unsetenv N`, `job_control N=V`, `error MSG`, then `rc init=A post_opt=B user_init=C`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_spank.h"

int slurm_spank_init(spank_t sp, int ac, char **av);
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av);
int slurm_spank_user_init(spank_t sp, int ac, char **av);

int main(int argc, char **argv)
{
    const char *opts[16];
    int nopts = 0, i = 2;
    int rc_init, rc_post = 0, rc_user = 0;

    if (argc < 2)
        return 2;
    mock.quiet = 1;
    mock_reset(!strcmp(argv[1], "remote") ? S_CTX_REMOTE : !strcmp(argv[1], "allocator") ? S_CTX_ALLOCATOR
                                                                                           : S_CTX_LOCAL);
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (!strcmp(argv[i], "--uid") && i + 1 < argc)
            mock.uid = (uid_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--gid") && i + 1 < argc)
            mock.gid = (gid_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--opt") && i + 1 < argc && nopts < 16)
            opts[nopts++] = argv[++i];
        else
            return 2;
    }
    if (i < argc)
        i++;
    rc_init = slurm_spank_init(NULL, argc - i, argv + i);
    for (int k = 0; k < nopts && rc_init == 0; k++) {
        char name[128];
        const char *eq = strchr(opts[k], '=');
        const struct spank_option *o;

        snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - opts[k]) : (int)strlen(opts[k]), opts[k]);
        if (!(o = mock_option(name)))
            return 2;
        if (o->cb(o->val, eq ? eq + 1 : NULL, mock.context == S_CTX_REMOTE) != 0)
            rc_init = -1;
    }
    if (rc_init == 0) {
        rc_post = slurm_spank_init_post_opt(NULL, argc - i, argv + i);
        if (mock.context == S_CTX_REMOTE)
            rc_user = slurm_spank_user_init(NULL, argc - i, argv + i);
    }
    for (int k = 0; k < mock.ncalls; k++) {
        const struct mock_call *c = &mock.call[k];

        if (c->kind == MOCK_SETENV)
            printf("setenv %s=%s\n", c->name, c->value);
        else if (c->kind == MOCK_UNSETENV)
            printf("unsetenv %s\n", c->name);
        else if (c->kind == MOCK_JOB_CONTROL)
            printf("job_control %s=%s\n", c->name, c->value);
        else
            printf("error %s\n", c->value);
    }
    printf("rc init=%d post_opt=%d user_init=%d\n", rc_init, rc_post, rc_user);
    return 0;
}
