/* Issue 17, row 1: 60 pthread_atfork registrations before the process's
 * first malloc. Past its inline slots glibc mallocs under its atfork lock,
 * so the first malloc happens inside __register_atfork: an allocator whose
 * start-up registers fork handlers of its own waits on that lock forever.
 * Nothing here may call malloc (or printf) before the registrations: the
 * output goes through write(2). Then malloc, fork, wait: must complete. */
#include "issue_common.h"

static volatile int prepared, in_parent, in_child;
static void prep(void) { prepared++; }
static void par(void) { in_parent++; }
static void chi(void) { in_child++; }

int main(void) {
    for (int i = 0; i < 60; i++) {
        if (pthread_atfork(prep, par, chi) != 0) {
            wr(1, "FAIL: pthread_atfork failed\n");
            return 1;
        }
    }
    wr_num(1, "registered: ", 60);
    char *p = malloc(100);
    CHECK(p);
    keep(p);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char *q = malloc(1000);
        if (!q || in_child != 60) _exit(3);
        keep(q);
        free(q);
        free(p);
        _exit(0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        wr_num(1, "FAIL: child status ", (unsigned)st);
        return 1;
    }
    if (prepared != 60 || in_parent != 60) {
        wr_num(1, "FAIL: fork handlers ran in the parent: ", (unsigned)in_parent);
        return 1;
    }
    free(p);
    wr(1, "lc_atfork ok\n");
    return 0;
}
