/* Issue 17, row 8: posix_memalign, aligned_alloc and memalign with
 * alignments 2^28, 2^30 and 2^33, for 1 KiB and then 5 MiB, succeed and
 * return aligned pointers whose first and last bytes can be written, and
 * that can be freed. (2^33 is skipped where the machine could not map
 * twice that, as glibc could not either.) */
#include "issue_common.h"

int main(void) {
    int bad = 0;
    int shifts[] = {28, 30, 33};
    size_t sizes[] = {KiB, 5 * MiB};
    uint64_t room = mem_total() + swap_total();
    for (int si = 0; si < 2; si++) {
        for (int ai = 0; ai < 3; ai++) {
            size_t align = (size_t)1 << shifts[ai], n = sizes[si];
            if (overcommit_mode() != 1 && room < 2 * (uint64_t)align) {
                printf("skip 2^%d: MemTotal + SwapTotal %llu MiB\n", shifts[ai],
                       (unsigned long long)(room / MiB));
                continue;
            }
            for (int fn = 0; fn < 3; fn++) {
                const char *name[] = {"posix_memalign", "aligned_alloc", "memalign"};
                void *p = NULL;
                errno = 0;
                int rc = 0;
                if (fn == 0) {
                    rc = posix_memalign(&p, align, n);
                    if (rc) p = NULL;
                } else if (fn == 1) {
                    p = aligned_alloc(align, n);
                    rc = p ? 0 : errno;
                } else {
                    p = memalign(align, n);
                    rc = p ? 0 : errno;
                }
                if (!p) {
                    printf("FAIL: %s(2^%d, %zu) failed: error %d\n", name[fn], shifts[ai], n, rc);
                    bad = 1;
                    continue;
                }
                if ((uintptr_t)p % align) {
                    printf("FAIL: %s(2^%d, %zu) = %p: not aligned\n", name[fn], shifts[ai], n, p);
                    bad = 1;
                }
                ((volatile char *)p)[0] = 1;
                ((volatile char *)p)[n - 1] = 2;
                keep(p);
                free(p);
            }
        }
    }
    if (bad) return 1;
    printf("lc_big_align ok\n");
    return 0;
}
