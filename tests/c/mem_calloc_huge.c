/* Issue 43, calloc of a cached huge block: ROUNDS (20) x calloc(1 GiB),
 * each touched sparsely (one byte every 64 MiB read as zero, then written)
 * and freed, so each calloc after the first may be served by the block
 * the last one freed. Prints the time and the peak RSS (VmHWM). Before,
 * a cached block was zeroed by hand: 20 x 1 GiB of writes, the whole GiB
 * resident. glibc maps each one fresh: about 1 MiB resident. Fails if a
 * byte read is not zero, or the peak passes LIMIT_MIB (default 128). */
#include "issue_common.h"

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    size_t limit = (argc > 2 ? (size_t)atol(argv[2]) : 128) * MiB;
    size_t size = GiB, step = 64 * MiB;
    start_up();
    double t0 = now_s();
    for (int r = 0; r < rounds; r++) {
        unsigned char *p = calloc(1, size);
        CHECK(p);
        for (size_t off = (size_t)r * 4096 % step; off < size; off += step) {
            if (p[off] != 0) {
                printf("FAIL: round %d: byte %zu is %d, not zero\n", r, off, p[off]);
                return 1;
            }
            p[off] = 0xA5;
        }
        p[size - 1] = 1;
        free(p);
    }
    double t = now_s() - t0;
    uint64_t hwm = proc_kib_field("/proc/self/status", "VmHWM");
    printf("%d x calloc(1 GiB): %.3f s, peak RSS %.1f MiB\n", rounds, t, (double)hwm / MiB);
    if (hwm > limit) {
        printf("FAIL: peak RSS %.1f MiB above %zu MiB\n", (double)hwm / MiB, limit / MiB);
        return 1;
    }
    printf("mem_calloc_huge ok\n");
    return 0;
}
