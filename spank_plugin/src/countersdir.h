/* counters_dir= of plugstack.conf: the fleet NCCL plugin writes its counters file <pid>.json into
 * <counters_dir>/<uid> (docs/failover.md). A job that is not root's cannot create that directory
 * under /run/fleetctl, so slurmstepd prepares it as root, before privileges are dropped, owned by
 * the job's user: each user writes only into a directory of their own. No Slurm here, so it is
 * tested on its own (tests/unit/test_spank_plugin.py). */
#ifndef SPANK_FLEETCTL_COUNTERSDIR_H
#define SPANK_FLEETCTL_COUNTERSDIR_H

#include <stddef.h>
#include <sys/types.h>

#define FLEET_DEFAULT_COUNTERS_DIR "/run/fleetctl/failover"

/* Create `base` (missing levels root 0755) unless it exists; it must then be a directory (no
 * symlink) owned by root and writable by nobody else. Create or reuse <base>/<uid> (no symlink,
 * owned by root or `uid`), and make it uid:gid 0755. 0 ok with the directory in `out`; -1 with
 * `why` (at most `why_len` bytes). */
int fleet_counters_prepare(const char *base, uid_t uid, gid_t gid, char *out, size_t out_len, char *why,
                           size_t why_len);

#endif
