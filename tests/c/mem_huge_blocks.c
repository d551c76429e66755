/* Issue 43, item 5: what a huge block costs in mappings and address
 * space. mem_huge_blocks MIB MAX: mallocs blocks of MIB MiB (not touched)
 * until malloc returns NULL or MAX are live, then counts the lines of
 * /proc/self/maps. Prints "blocks N", "maps_before N", "maps_after N" and
 * "vm_size_kib N"; "failed_at N" when a malloc returned NULL. Run under
 * `ulimit -v` (RLIMIT_AS) to see how many fit, or with a large MAX to see
 * that each block is one mapping. */
#include "issue_common.h"

static long maps_lines(void) {
    char buf[65536];
    int fd = open("/proc/self/maps", O_RDONLY);
    CHECK(fd >= 0);
    long lines = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < n; i++) lines += buf[i] == '\n';
    close(fd);
    return lines;
}

int main(int argc, char **argv) {
    size_t size = (size_t)(argc > 1 ? atol(argv[1]) : 5) * MiB;
    long max = argc > 2 ? atol(argv[2]) : 100000;
    start_up();
    void **blocks = calloc((size_t)max, sizeof *blocks);
    CHECK(blocks);
    long before = maps_lines();
    long n = 0;
    while (n < max) {
        void *p = malloc(size);
        if (!p) {
            printf("failed_at %ld\n", n);
            break;
        }
        blocks[n++] = p;
    }
    long after = maps_lines();
    printf("blocks %ld\nmaps_before %ld\nmaps_after %ld\n", n, before, after);
    printf("vm_size_kib %llu\n",
           (unsigned long long)(proc_kib_field("/proc/self/status", "VmSize") / KiB));
    /* The blocks are usable: a byte written at each end of a few. */
    for (long i = 0; i < n; i += 97) {
        ((char *)blocks[i])[0] = 1;
        ((char *)blocks[i])[size - 1] = 1;
    }
    for (long i = 0; i < n; i++) free(blocks[i]);
    free(blocks);
    printf("mem_huge_blocks ok\n");
    return 0;
}
