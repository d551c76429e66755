/* Issue 16, row 3: three untouched malloc of 45% of MemTotal each (sparse
 * buffers, relying on overcommit) all succeed, as on glibc: a default
 * budget must not count address space that was never touched. Writes one
 * byte of each, no more. */
#include "issue_common.h"

int main(void) {
    size_t n = (size_t)(mem_total() / 100 * 45);
    CHECK(n > 0);
    void *v[3];
    int got = 0;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        v[i] = malloc(n);
        if (!v[i]) {
            printf("FAIL: malloc #%d of %zu bytes (45%% of MemTotal) returned NULL, errno %d\n",
                   i + 1, n, errno);
            continue;
        }
        ((char *)v[i])[0] = 1;
        ((char *)v[i])[n / 2] = 1;
        keep(v[i]);
        got++;
    }
    for (int i = 0; i < 3; i++) free(v[i]);
    if (got != 3) return 1;
    printf("budget_overcommit ok %zu\n", n);
    return 0;
}
