/* Issue 43, item 1: a big array touched sparsely. mem_huge_sparse MODE MIB
 * STRIDE_KIB [TABLES]: TABLES (default 1) blocks of MIB MiB, by malloc or
 * calloc (MODE), all live at once, each written one byte every STRIDE_KIB
 * KiB — the first half of the strides, then 300 ms of small allocations
 * (an allocator that looks at how its blocks are used gets its chance),
 * then the second half. Prints the VmRSS at the end ("rss_kib N"); with
 * huge pages advised on a fresh block, each touch faults in 2 MiB. glibc
 * maps each block fresh and leaves it to the system: 4 KiB a touch where
 * THP is madvise-only. */
#include "issue_common.h"

int main(int argc, char **argv) {
    CHECK(argc >= 4);
    int zero = strcmp(argv[1], "calloc") == 0;
    size_t size = (size_t)atol(argv[2]) * MiB;
    size_t stride = (size_t)atol(argv[3]) * KiB;
    int tables = argc > 4 ? atoi(argv[4]) : 1;
    CHECK(stride >= 4096 && tables >= 1 && tables <= 16);
    start_up();
    unsigned char *t[16];
    for (int i = 0; i < tables; i++) {
        t[i] = zero ? calloc(1, size) : malloc(size);
        CHECK(t[i]);
    }
    size_t half = size / stride / 2 * stride;
    for (int i = 0; i < tables; i++)
        for (size_t off = 0; off < half; off += stride) {
            if (zero && t[i][off] != 0) {
                printf("FAIL: table %d byte %zu is %d, not zero\n", i, off, t[i][off]);
                return 1;
            }
            t[i][off] = 1;
        }
    /* Small allocations for 300 ms: slow paths, where the allocator's
     * own work runs when it has no thread. */
    double t0 = now_s();
    void *keep_some[64] = {0};
    for (unsigned k = 0; now_s() - t0 < 0.3; k++) {
        void *p = malloc(16 + (k % 64) * 256);
        CHECK(p);
        memset(p, 1, 16);
        free(keep_some[k % 64]);
        keep_some[k % 64] = p;
        if (k % 1024 == 0) sleep_ms(1);
    }
    for (int k = 0; k < 64; k++) free(keep_some[k]);
    for (int i = 0; i < tables; i++)
        for (size_t off = half; off < size; off += stride) {
            if (zero && t[i][off] != 0) {
                printf("FAIL: table %d byte %zu is %d, not zero\n", i, off, t[i][off]);
                return 1;
            }
            t[i][off] = 1;
        }
    uint64_t rss = vm_rss();
    printf("%d x %s(%zu MiB), a byte every %zu KiB: VmRSS %.1f MiB\n", tables, argv[1],
           size / MiB, stride / KiB, (double)rss / MiB);
    printf("rss_kib %llu\n", (unsigned long long)(rss / KiB));
    for (int i = 0; i < tables; i++) free(t[i]);
    printf("mem_huge_sparse ok\n");
    return 0;
}
