/* Issue 19: transparent huge pages as PCPALLOC_THP says. Allocates MIB MiB
 * of 64-byte objects (each its own malloc, every one written), then waits
 * up to WAIT seconds for the tick to collapse what was faulted in before
 * huge pages were asked for, and prints:
 *   heap_kib   the objects' bytes
 *   rollup_kib smaps_rollup's AnonHugePages: every huge page of the process
 *   stat_kib   pcpalloc's huge_page_bytes (its own mappings only)
 * With no argument beyond MIB it does not wait.
 *
 *   thp_policy MIB [WAIT] */
#include "issue_common.h"

static long rollup_kib(const char *field) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0) v = atol(line + n);
    if (f) fclose(f);
    return v;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256;
    double wait = argc > 2 ? atof(argv[2]) : 0;
    size_t n = mib * MiB / 64;
    void **objs = malloc(n * sizeof *objs);
    CHECK(objs);
    for (size_t i = 0; i < n; i++) {
        objs[i] = malloc(64);
        CHECK(objs[i]);
        memset(objs[i], 1, 64);
    }
    /* The tick collapses at most 64 MiB a second: wait until the share
     * stops growing, or WAIT seconds. */
    long huge = rollup_kib("AnonHugePages:");
    for (double t = 0; t < wait; t += 0.25) {
        struct timespec ts = {0, 250 * 1000 * 1000};
        nanosleep(&ts, NULL);
        long now = rollup_kib("AnonHugePages:");
        if (now >= (long)(mib * 1024 * 95 / 100)) {
            huge = now;
            break;
        }
        huge = now;
    }
    printf("heap_kib %zu\n", mib * 1024);
    printf("rollup_kib %ld\n", huge);
    stat_fn f = pcp_stat_fn();
    uint64_t v = 0;
    if (f && f("huge_page_bytes", &v) == 0) printf("stat_kib %llu\n", (unsigned long long)(v >> 10));
    /* Every object still holds what was written. */
    for (size_t i = 0; i < n; i += 4099) CHECK(((unsigned char *)objs[i])[63] == 1);
    for (size_t i = 0; i < n; i++) free(objs[i]);
    free(objs);
    printf("thp_policy ok\n");
    return 0;
}
