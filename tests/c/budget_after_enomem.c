/* Issue 16, row 1: a huge request the OS refuses must not poison the
 * budget. Free an 8 MiB block (it may go to a cache), then malloc(64 GiB)
 * (more than this machine has: NULL with ENOMEM, as on glibc, unless
 * overcommit_memory is 1 or the machine has 64 GiB), then 256 x
 * 1 MiB and 4 x 8 MiB must all succeed; pcpalloc_stat("mapped_bytes") must
 * stay sane (below 1 TiB; it used to wrap below zero), and so must
 * charged_bytes where the report has it. */
#include "issue_common.h"

int main(void) {
    char *p = malloc(8 * MiB);
    CHECK(p);
    memset(p, 1, 8 * MiB);
    keep(p);
    free(p);

    size_t big = 64 * GiB;
    errno = 0;
    void *q = malloc(big);
    keep(q);
    /* The kernel refuses it unless overcommit is "always" (1) or the
     * machine has the memory: then glibc's malloc fails, and so must ours
     * (a program that memsets what it got would be OOM-killed). */
    int refused_here = overcommit_mode() != 1 && big > mem_total() + swap_total();
    if (q && refused_here) {
        printf("FAIL: malloc(64 GiB) succeeded on a machine that cannot back it (MemTotal + "
               "SwapTotal %llu MiB, overcommit_memory %d): the kernel, and glibc, refuse it\n",
               (unsigned long long)((mem_total() + swap_total()) / MiB), overcommit_mode());
        free(q);
        return 1;
    } else if (q) {
        printf("note: malloc(64 GiB) succeeded here (overcommit %d)\n", overcommit_mode());
        free(q);
    } else if (errno != ENOMEM) {
        printf("FAIL: malloc(64 GiB) failed with errno %d, not ENOMEM\n", errno);
        return 1;
    }

    static void *v[256];
    int failed = 0;
    for (int i = 0; i < 256; i++) {
        v[i] = malloc(MiB);
        if (!v[i]) {
            failed++;
            continue;
        }
        memset(v[i], 2, MiB);
        keep(v[i]);
    }
    void *w[4];
    int failed8 = 0;
    for (int i = 0; i < 4; i++) {
        w[i] = malloc(8 * MiB);
        if (!w[i]) {
            failed8++;
            continue;
        }
        memset(w[i], 3, 8 * MiB);
        keep(w[i]);
    }
    stat_fn f = pcp_stat_fn();
    uint64_t mapped = 0;
    int bad = 0;
    if (f) {
        CHECK(f("mapped_bytes", &mapped) == 0);
        printf("mapped_bytes %llu (as signed: %lld)\n", (unsigned long long)mapped,
               (long long)mapped);
        if (mapped >= ((uint64_t)1 << 40)) {
            printf("FAIL: mapped_bytes %lld is not below 1 TiB\n", (long long)mapped);
            bad = 1;
        }
        uint64_t charged = 0;
        if (f("charged_bytes", &charged) == 0 && charged >= ((uint64_t)1 << 40)) {
            printf("FAIL: charged_bytes %lld is not below 1 TiB\n", (long long)charged);
            bad = 1;
        }
    }
    if (failed || failed8) {
        printf("FAIL: after the refused 64 GiB request, %d of 256 malloc(1 MiB) and %d of 4 "
               "malloc(8 MiB) returned NULL\n",
               failed, failed8);
        bad = 1;
    }
    for (int i = 0; i < 256; i++) free(v[i]);
    for (int i = 0; i < 4; i++) free(w[i]);
    if (bad) return 1;
    printf("budget_after_enomem ok\n");
    return 0;
}
