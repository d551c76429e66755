/* Issue 16, row 6: under PCPALLOC_MEMORY_LIMIT (argv[1], in MiB) the limit
 * is never exceeded. The heap first holds 5/8 of the limit in 1 MiB blocks,
 * all freed again (the zone keeps that memory); then an 8 MiB block is
 * allocated, touched and freed (it goes to a cache); then a block of limit
 * - 4 MiB and 1 MiB blocks until NULL, every page touched. pcpalloc's
 * peak_mapped_bytes (peak_charged_bytes once renamed) must stay <= the
 * limit, and VmHWM (the process's peak RSS) must not grow by more than the
 * limit plus 2 MiB (metadata) over its value before the first of these
 * allocations. The big block may be refused (the limit may leave no room
 * for it beside metadata). Before the fix: the failed charge for growing
 * the cached block in place was "given back", the budget under-counted by
 * 52 MiB, and the process held about 115 MiB. */
#include "issue_common.h"

int main(int argc, char **argv) {
    require_pcpalloc();
    size_t limit = (size_t)atol(argc > 1 ? argv[1] : "64") * MiB;
    start_up();
    uint64_t hwm0 = vm_hwm();
    static void *v[4096];
    int warm = (int)(limit / MiB * 5 / 8);
    for (int i = 0; i < warm; i++) {
        v[i] = malloc(MiB);
        CHECK(v[i]);
        memset(v[i], 4, MiB);
        keep(v[i]);
    }
    for (int i = 0; i < warm; i++) free(v[i]);

    char *p = malloc(8 * MiB);
    CHECK(p);
    memset(p, 1, 8 * MiB);
    keep(p);
    free(p);

    size_t bign = limit - 4 * MiB;
    char *big = malloc(bign);
    int bad = 0;
    if (big) {
        memset(big, 2, bign);
        keep(big);
    }
    int k = 0;
    while (k < 4096) {
        char *q = malloc(MiB);
        if (!q) break;
        memset(q, 3, MiB);
        keep(q);
        v[k++] = q;
    }
    uint64_t hwm = vm_hwm();
    static const char *const peak_names[] = {"peak_mapped_bytes", "peak_charged_bytes", NULL};
    uint64_t peak = 0;
    const char *peak_name = pcp_stat_first(peak_names, &peak);
    CHECK(peak_name != NULL);
    uint64_t mapped = pcp_stat("mapped_bytes");
    printf("limit %zu MiB: %d x 1 MiB freed, 8 MiB cached, big block %s, then %d x 1 MiB; "
           "%s %.1f MiB, mapped_bytes %.1f MiB, VmHWM grew %.1f MiB\n",
           limit / MiB, warm, big ? "ok" : "NULL", k, peak_name, (double)peak / MiB,
           (double)mapped / MiB, (double)(hwm - hwm0) / MiB);
    if (k == 4096) {
        printf("FAIL: the limit was not enforced\n");
        bad = 1;
    }
    if (peak > limit) {
        printf("FAIL: %s %.1f MiB > limit %zu MiB\n", peak_name, (double)peak / MiB,
               limit / MiB);
        bad = 1;
    }
    if (hwm - hwm0 > limit + 2 * MiB) {
        printf("FAIL: VmHWM grew by %.1f MiB > limit %zu MiB + 2 MiB\n",
               (double)(hwm - hwm0) / MiB, limit / MiB);
        bad = 1;
    }
    for (int i = 0; i < k; i++) free(v[i]);
    free(big);
    if (bad) return 1;
    printf("budget_peak ok\n");
    return 0;
}
