/* Issue 17, row 9: a storm of argv[1] (5,000) short threads in waves of
 * argv[2] (20) alive at once (a barrier), each allocating a mix of sizes
 * (40 blocks of about 64 B to 1 MiB, a few MiB in all; the first argv[3]
 * (16) KiB and the last byte of each written), leaving 4 small blocks (of
 * different size classes) for a later thread to free — so an exited
 * thread's heap still has objects that another thread frees — and freeing
 * the rest. Then main sleeps 2 s without calling the allocator. With
 * PCPALLOC_BACKGROUND=0 and PCPALLOC_DECAY_MS=100 (set by the test) VmRSS
 * at the end must be within 16 MiB of its value before the storm. */
#include "storm.h"

int main(int argc, char **argv) {
    int n, wave;
    storm_args(argc, argv, &n, &wave);
    start_up();
    uint64_t rss0 = vm_rss();
    double t0 = now_s();
    storm_run(n, wave);
    double t1 = now_s();
    uint64_t rss1 = vm_rss();
    sleep_ms(2000);
    uint64_t rss = vm_rss();
    printf("%d threads in %.2f s: VmRSS %.1f MiB before, %.1f MiB after the storm, %.1f MiB after "
           "2 s idle\n",
           n, t1 - t0, (double)rss0 / MiB, (double)rss1 / MiB, (double)rss / MiB);
    if (rss > rss0 + 16 * MiB) {
        printf("FAIL: VmRSS %.1f MiB above its value before the storm after 2 s idle (at most "
               "16 MiB)\n",
               (double)(rss - rss0) / MiB);
        return 1;
    }
    printf("lc_thread_storm ok\n");
    return 0;
}
