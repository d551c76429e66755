/* Issue 17, row 5 (C): free_sized(p + 16, 16) for p = malloc(64) must abort
 * (SIGABRT) with one line on stderr naming the address, as free(p + 16)
 * does, instead of freeing a block that does not exist. A correct
 * free_sized first, to show the function works. The address is printed on
 * stdout (flushed) before the bad call. Exits 77 without free_sized. */
#include "issue_common.h"

typedef void (*free_sized_fn)(void *, size_t);

int main(void) {
    no_core();
    free_sized_fn fs = (free_sized_fn)dlsym(RTLD_DEFAULT, "free_sized");
    if (!fs) {
        printf("no free_sized in this libc\n");
        return 77;
    }
    char *ok = malloc(64);
    CHECK(ok);
    keep(ok);
    fs(ok, 64);
    char *p = malloc(64);
    CHECK(p);
    memset(p, 0, 64);
    keep(p);
    printf("bad %p\n", (void *)(p + 16));
    fflush(stdout);
    fs(p + 16, 16);
    /* Survived: show what that did. */
    char *a = malloc(16), *b = malloc(16);
    printf("survived: free_sized(%p, 16) returned; then malloc(16) gave %p and %p\n",
           (void *)(p + 16), (void *)a, (void *)b);
    return 0;
}
