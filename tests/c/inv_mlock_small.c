/* Issue 42, item 6: a small program that locks its memory. It mallocs a
 * little, then mlockall(MCL_CURRENT | MCL_FUTURE), then mallocs and frees
 * a few MiB. Prints VmSize, VmRSS and VmLck (KiB) at start, after the
 * first mallocs, after mlockall and after the MiB, and mlockall's result:
 *
 *   START vmsize <k> vmrss <k> vmlck <k>
 *   SMALL vmsize <k> vmrss <k> vmlck <k>
 *   MLOCKALL ok | MLOCKALL failed <errno name>
 *   LOCKED vmsize <k> vmrss <k> vmlck <k>
 *   MIB vmsize <k> vmrss <k> vmlck <k> failed_mallocs <n>
 *   inv_mlock_small ok
 *
 * With `exec-as UID GID MEMLOCK_BYTES`, run as root: forks, and the child
 * sets RLIMIT_MEMLOCK to MEMLOCK_BYTES, drops to GID/UID and execs this
 * program again (without arguments), as an unprivileged user's program
 * starts; the parent waits and exits with the child's status. Nothing is
 * allocated before the exec (the allocator under test starts in the
 * child). */
#include "issue_common.h"

#include <grp.h>
#include <sys/mman.h>

static void report(const char *what) {
    char line[200];
    int n = snprintf(line, sizeof line, "%s vmsize %llu vmrss %llu vmlck %llu\n", what,
                     (unsigned long long)(proc_kib_field("/proc/self/status", "VmSize") >> 10),
                     (unsigned long long)(proc_kib_field("/proc/self/status", "VmRSS") >> 10),
                     (unsigned long long)(proc_kib_field("/proc/self/status", "VmLck") >> 10));
    write(1, line, (size_t)n);
}

static int exec_as(char **argv) {
    uid_t uid = (uid_t)atoi(argv[2]);
    gid_t gid = (gid_t)atoi(argv[3]);
    rlim_t lim = (rlim_t)strtoull(argv[4], NULL, 10);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        struct rlimit r = {lim, lim};
        if (setrlimit(RLIMIT_MEMLOCK, &r) != 0 || setgroups(0, NULL) != 0 || setgid(gid) != 0 ||
            setuid(uid) != 0) {
            wr(2, "inv_mlock_small: cannot drop privileges\n");
            _exit(3);
        }
        char *args[] = {argv[0], NULL};
        execv("/proc/self/exe", args);
        wr(2, "inv_mlock_small: exec failed\n");
        _exit(4);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return 1;
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return WEXITSTATUS(st);
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "exec-as") == 0) return exec_as(argv);
    report("START");
    /* A little: a few small blocks and one of 20 KiB. */
    void *little[16];
    for (int i = 0; i < 15; i++) {
        little[i] = malloc(32 + 48 * (size_t)i);
        CHECK(little[i]);
        keep(little[i]);
    }
    little[15] = malloc(20 << 10);
    CHECK(little[15]);
    memset(little[15], 1, 20 << 10);
    report("SMALL");
    if (mlockall(MCL_CURRENT | MCL_FUTURE) == 0) {
        wr(1, "MLOCKALL ok\n");
    } else {
        int e = errno;
        wr(1, "MLOCKALL failed ");
        wr(1, e == ENOMEM ? "ENOMEM" : e == EPERM ? "EPERM" : e == EAGAIN ? "EAGAIN" : "other");
        wr(1, "\n");
    }
    report("LOCKED");
    /* A few MiB: 48 blocks of 64 KiB and two of 512 KiB, freed again. */
    int failed = 0;
    void *blocks[50];
    for (int i = 0; i < 50; i++) {
        size_t n = i < 48 ? (size_t)64 << 10 : (size_t)512 << 10;
        blocks[i] = malloc(n);
        if (blocks[i]) {
            memset(blocks[i], 2, n);
        } else {
            failed++;
        }
    }
    char line[64];
    report("MIB");
    snprintf(line, sizeof line, "MIB_FAILED %d\n", failed);
    wr(1, line);
    for (int i = 0; i < 50; i++) free(blocks[i]);
    for (int i = 0; i < 16; i++) free(little[i]);
    munlockall();
    wr(1, "inv_mlock_small ok\n");
    return 0;
}
