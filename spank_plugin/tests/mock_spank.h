/* A stand-in for the part of Slurm's SPANK API spank_fleetctl uses, so that the plugin's own
 * objects run outside slurmstepd: tests/spank_run.c (the test driver) and tests/fuzz_spank.c. Every
 * call the plugin makes is recorded. */
#ifndef SPANK_FLEETCTL_MOCK_H
#define SPANK_FLEETCTL_MOCK_H

#include <sys/types.h>
#include <slurm/spank.h>

enum mock_kind { MOCK_SETENV = 1, MOCK_UNSETENV, MOCK_JOB_CONTROL, MOCK_ERROR };
#define MOCK_MAX_CALLS 256
#define MOCK_MAX_OPTIONS 16

struct mock_call {
    enum mock_kind kind;
    char name[128];
    char value[2048];   /* setenv/job_control: the value; error: the whole message */
};

struct mock_state {
    spank_context_t context;
    uid_t uid;
    gid_t gid;
    int fail_setenv;                  /* 1: every setenv fails */
    int quiet;                        /* 1: errors are recorded, not printed */
    int ncalls, overflow;
    struct mock_call call[MOCK_MAX_CALLS];
    int noptions;
    struct spank_option option[MOCK_MAX_OPTIONS];
};
extern struct mock_state mock;

void mock_reset(spank_context_t context);
/* the registered option of that name (NULL when none) */
const struct spank_option *mock_option(const char *name);

#endif
