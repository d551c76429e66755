/* realloc grows and shrinks across small, large and huge blocks and the
 * data up to the smaller size is always kept. */
#include "common.h"

int main(void) {
    require_pcpalloc();
    size_t steps[] = {1, 8, 17, 64, 200, 1024, 4000, 8192, 8193, 20000, 65536,
                      1u << 20, (4u << 20), (4u << 20) + 1, 6u << 20, 32u << 20};
    int ns = sizeof steps / sizeof *steps;
    for (int round = 0; round < 3; round++) {
        size_t cur = steps[0];
        char *p = malloc(cur);
        fill(p, cur, 7);
        /* grow through every range */
        for (int i = 1; i < ns; i++) {
            size_t next = steps[i];
            p = realloc(p, next);
            CHECK(p);
            CHECK(check(p, cur, 7));
            fill(p, next, 7);
            cur = next;
        }
        /* shrink back down */
        for (int i = ns - 2; i >= 0; i--) {
            size_t next = steps[i];
            p = realloc(p, next);
            CHECK(p);
            CHECK(check(p, next, 7));
            cur = next;
        }
        free(p);
    }
    /* realloc(NULL, n) is malloc; realloc(p, 0) frees and returns NULL. */
    char *q = realloc(NULL, 100);
    CHECK(q);
    CHECK(realloc(q, 0) == NULL);
    /* Many interleaved reallocs of small blocks keep their contents. */
    char *v[256];
    size_t len[256];
    for (int i = 0; i < 256; i++) {
        len[i] = 1 + i;
        v[i] = malloc(len[i]);
        fill(v[i], len[i], i);
    }
    for (int r = 0; r < 20; r++)
        for (int i = 0; i < 256; i++) {
            size_t nl = (len[i] * 3 + r * 17) % 30000 + 1;
            v[i] = realloc(v[i], nl);
            CHECK(v[i]);
            CHECK(check(v[i], nl < len[i] ? nl : len[i], i));
            fill(v[i], nl, i);
            len[i] = nl;
        }
    for (int i = 0; i < 256; i++) free(v[i]);
    puts("realloc_sizes ok");
    return 0;
}
