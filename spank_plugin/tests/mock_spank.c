/* See mock_spank.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mock_spank.h"

struct mock_state mock;

void mock_reset(spank_context_t context)
{
    int quiet = mock.quiet;

    memset(&mock, 0, sizeof(mock));
    mock.context = context;
    mock.quiet = quiet;
}

static void record(enum mock_kind kind, const char *name, const char *value)
{
    struct mock_call *c;

    if (mock.ncalls == MOCK_MAX_CALLS) {
        mock.overflow = 1;
        return;
    }
    c = &mock.call[mock.ncalls++];
    c->kind = kind;
    snprintf(c->name, sizeof(c->name), "%s", name ? name : "");
    snprintf(c->value, sizeof(c->value), "%s", value ? value : "");
}

const struct spank_option *mock_option(const char *name)
{
    for (int i = 0; i < mock.noptions; i++)
        if (strcmp(mock.option[i].name, name) == 0)
            return &mock.option[i];
    return NULL;
}

void slurm_error(const char *format, ...)
{
    char msg[2048];
    va_list ap;

    va_start(ap, format);
    vsnprintf(msg, sizeof(msg), format, ap);
    va_end(ap);
    record(MOCK_ERROR, "", msg);
    if (!mock.quiet)
        fprintf(stderr, "error: %s\n", msg);
}

spank_context_t spank_context(void)
{
    return mock.context;
}

const char *spank_strerror(spank_err_t err)
{
    return err == ESPANK_SUCCESS ? "Success" : "Generic error";
}

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
    (void)sp;
    if (mock.noptions == MOCK_MAX_OPTIONS)
        return ESPANK_ERROR;
    mock.option[mock.noptions++] = *opt;
    return ESPANK_SUCCESS;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
    va_list ap;
    spank_err_t rc = ESPANK_SUCCESS;

    (void)sp;
    va_start(ap, item);
    if (item == S_JOB_UID)
        *va_arg(ap, uid_t *) = mock.uid;
    else if (item == S_JOB_GID)
        *va_arg(ap, gid_t *) = mock.gid;
    else
        rc = ESPANK_BAD_ARG;
    va_end(ap);
    return rc;
}

spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
    (void)sp;
    (void)overwrite;
    if (mock.fail_setenv)
        return ESPANK_ERROR;
    record(MOCK_SETENV, var, val);
    return ESPANK_SUCCESS;
}

spank_err_t spank_unsetenv(spank_t sp, const char *var)
{
    (void)sp;
    record(MOCK_UNSETENV, var, NULL);
    return ESPANK_SUCCESS;
}

spank_err_t spank_job_control_setenv(spank_t sp, const char *name, const char *value, int overwrite)
{
    (void)sp;
    (void)overwrite;
    if (mock.fail_setenv)
        return ESPANK_ERROR;
    record(MOCK_JOB_CONTROL, name, value);
    return ESPANK_SUCCESS;
}
