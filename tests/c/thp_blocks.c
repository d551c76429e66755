/* Issue 19 (and 18): under PCPALLOC_THP=dense only small objects'
 * pageblocks get huge pages; page-granular blocks stay in 4 KiB pages,
 * where touching a buffer's ends faults in 4 KiB, not 2 MiB. Allocates MIB
 * MiB of 256 KiB blocks, writes every page of each, and prints:
 *   heap_kib   the blocks' bytes
 *   stat_kib   pcpalloc's huge_page_bytes (its own mappings only)
 *
 *   thp_blocks MIB */
#include "issue_common.h"

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256;
    size_t n = mib * 4;
    char *blocks[4096];
    CHECK(n <= 4096);
    for (size_t i = 0; i < n; i++) {
        blocks[i] = malloc(256 << 10);
        CHECK(blocks[i]);
        for (size_t o = 0; o < (256 << 10); o += 4096) blocks[i][o] = (char)i;
    }
    printf("heap_kib %zu\n", mib * 1024);
    stat_fn f = pcp_stat_fn();
    uint64_t v = 0;
    CHECK(f && f("huge_page_bytes", &v) == 0);
    printf("stat_kib %llu\n", (unsigned long long)(v >> 10));
    for (size_t i = 0; i < n; i++) {
        CHECK(blocks[i][4096] == (char)i);
        free(blocks[i]);
    }
    printf("thp_blocks ok\n");
    return 0;
}
