/* Issue 19: under PCPALLOC_THP=dense, memory churned through by small
 * objects that die young stays in 4 KiB pages (grouping by lifetime puts
 * them in reclaimable pageblocks, which are not huge pages), while with
 * PCPALLOC_GROUPING=mobility the same memory is faulted in 2 MiB at a time
 * once the heap passes 64 MiB. Rounds r = 1..6 each allocate r * MIB/6 MiB
 * of 256-byte objects (every one written) and free them all; at the peak
 * of the last round it prints:
 *   heap_kib   the objects' bytes then
 *   stat_kib   pcpalloc's huge_page_bytes
 *
 *   thp_churn MIB */
#include "issue_common.h"

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 144;
    size_t most = (mib << 20) / 256;
    char **v = malloc(most * sizeof *v);
    CHECK(v);
    stat_fn f = pcp_stat_fn();
    CHECK(f);
    for (size_t r = 1; r <= 6; r++) {
        size_t n = most * r / 6;
        for (size_t i = 0; i < n; i++) {
            v[i] = malloc(256);
            CHECK(v[i]);
            memset(v[i], (int)i, 256);
        }
        if (r == 6) {
            uint64_t huge = 0;
            CHECK(f("huge_page_bytes", &huge) == 0);
            printf("heap_kib %zu\n", n / 4);
            printf("stat_kib %llu\n", (unsigned long long)(huge >> 10));
        }
        for (size_t i = 0; i < n; i++) {
            CHECK(v[i][255] == (char)i);
            free(v[i]);
        }
    }
    free(v);
    printf("thp_churn ok\n");
    return 0;
}
