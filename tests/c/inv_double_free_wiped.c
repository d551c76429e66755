/* Issue 42, a double free after a use-after-free write: a 64-byte block
 * is freed, its first 16 bytes cleared through the dangling pointer (the
 * free key with them), and freed again. Then 10,000 malloc(64), all kept:
 * how often does the block come back? Before: the block sat on its bin as
 * a self-loop and every malloc(64) of the thread returned it (9,999
 * duplicates). A bin must never hand one block out more than twice: the
 * allocator may abort with a line naming the address, or hand it out a
 * second time, never loop. glibc: one duplicate (its tcache count bounds
 * the damage). Prints the address first so the test can find it in the
 * abort line. */
#include "issue_common.h"

int main(int argc, char **argv) {
    size_t size = argc > 1 ? (size_t)atol(argv[1]) : 64;
    /* A neighbour freed in between (the list A -> B -> A case) when asked. */
    int with_neighbour = argc > 2 && atoi(argv[2]) != 0;
    start_up();
    char *p = malloc(size);
    char *b = malloc(size);
    CHECK(p && b);
    printf("block %p\n", (void *)p);
    fflush(stdout);
    free(p);
    if (with_neighbour) free(b);
    /* The use after free, through a volatile pointer: gcc drops a plain
     * memset into a freed block. */
    volatile char *dangling = p;
    for (int i = 0; i < 16; i++) dangling[i] = 0;
    free(p);          /* the double free */
    int n = 10000, dups = 0;
    static void *got[10000];
    for (int i = 0; i < n; i++) {
        got[i] = malloc(size);
        CHECK(got[i]);
        if (got[i] == p) dups++;
    }
    printf("block handed out %d times of %d\n", dups, n);
    printf("inv_double_free_wiped done\n");
    return 0;
}
