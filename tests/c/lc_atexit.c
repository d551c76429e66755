/* Issue 17, row 2: 40 atexit registrations before the process's first
 * malloc. Past its first block of 32 glibc callocs a new one under
 * __exit_funcs_lock, so the first malloc happens inside atexit: an
 * allocator whose start-up registers an exit hook (for PCPALLOC_STATS or
 * PCPALLOC_TRACE) through atexit waits on that lock forever. No malloc or
 * printf before the registrations. Every handler must run, once. */
#include "issue_common.h"

static volatile int ran;

static void handler(void) { ran++; }

static void first(void) {
    /* Registered first: runs last. */
    ran++;
    if (ran == 40) {
        wr(1, "lc_atexit ok\n");
    } else {
        wr_num(1, "FAIL: atexit handlers run: ", (unsigned)ran);
        _exit(1);
    }
}

int main(void) {
    if (atexit(first) != 0) return 2;
    for (int i = 1; i < 40; i++) {
        if (atexit(handler) != 0) {
            wr(1, "FAIL: atexit failed\n");
            return 1;
        }
    }
    wr(1, "registered 40\n");
    char *p = malloc(100);
    CHECK(p);
    memset(p, 1, 100);
    keep(p);
    free(p);
    void *q = malloc(64 * KiB);
    keep(q);
    free(q);
    return 0;
}
