/* Issue 43, item 5: the address space a small program needs to start and
 * allocate. Allocates a little of every size (small objects, page-granular
 * blocks, a 5 MiB block), frees it, and prints VmPeak ("vm_peak_kib N").
 * Run under `ulimit -v` (RLIMIT_AS) a few MiB above glibc's figure. */
#include "issue_common.h"

int main(void) {
    void *small[256];
    for (int i = 0; i < 256; i++) {
        small[i] = malloc(16 + i * 8);
        CHECK(small[i]);
        memset(small[i], 1, 16);
    }
    void *large = malloc(200 * KiB);
    CHECK(large);
    memset(large, 2, 200 * KiB);
    void *huge = malloc(5 * MiB);
    CHECK(huge);
    memset(huge, 3, 64 * KiB);
    free(huge);
    free(large);
    for (int i = 0; i < 256; i++) free(small[i]);
    char *line = strdup("still allocating after the frees");
    CHECK(line);
    free(line);
    /* Which malloc ran: ld.so skips a preload it cannot map, silently
     * but for a line on stderr. */
    printf("allocator %s\n", pcp_stat_fn() ? "pcpalloc" : "glibc");
    printf("vm_peak_kib %llu\n",
           (unsigned long long)(proc_kib_field("/proc/self/status", "VmPeak") / KiB));
    printf("mem_huge_start ok\n");
    return 0;
}
