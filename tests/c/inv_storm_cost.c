/* Issue 42, item 2: what the thread storm of lc_thread_storm costs — the
 * same storm (argv[1] short threads in waves of argv[2], each allocating
 * 40 blocks of 64 B to 1 MiB written in their first argv[3] KiB and last
 * byte, leaving 4 small blocks for a later thread) — measured over the
 * storm alone: wall time, CPU time (user + system, every thread) and page
 * faults (minor and major) of the process; under pcpalloc also the slabs
 * it made. No idle wait: lc_thread_storm checks the memory. */
#include "storm.h"

static double cpu_s(const struct rusage *r) {
    return r->ru_utime.tv_sec + r->ru_utime.tv_usec * 1e-6 + r->ru_stime.tv_sec +
           r->ru_stime.tv_usec * 1e-6;
}

int main(int argc, char **argv) {
    int n, wave;
    storm_args(argc, argv, &n, &wave);
    start_up();
    uint64_t slabs0 = 0, slabs1 = 0;
    const char *const names[] = {"slabs_created", NULL};
    int pcp = pcp_stat_first(names, &slabs0) != NULL;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now_s();
    storm_run(n, wave);
    double t1 = now_s();
    getrusage(RUSAGE_SELF, &r1);
    if (pcp) pcp_stat_first(names, &slabs1);
    printf("storm: wall %.3f cpu %.3f faults %ld slabs %lld\n", t1 - t0, cpu_s(&r1) - cpu_s(&r0),
           (r1.ru_minflt - r0.ru_minflt) + (r1.ru_majflt - r0.ru_majflt),
           pcp ? (long long)(slabs1 - slabs0) : -1LL);
    return 0;
}
