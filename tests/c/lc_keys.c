/* Issue 17, row 3: 40 pthread keys created before the process's first
 * malloc, so a key the allocator creates at start-up has an index >= 32
 * and pthread_setspecific on it callocs the thread's second-level key
 * block (which must not recurse into the allocator's thread set-up). Then
 * malloc in main and in 8 threads: no crash. */
#include "issue_common.h"

static pthread_key_t keys[40];

static void *worker(void *arg) {
    uintptr_t id = (uintptr_t)arg;
    for (int i = 0; i < 100; i++) {
        char *p = malloc(16 + i * 40);
        CHECK(p);
        memset(p, (int)id, 16 + i * 40);
        keep(p);
        free(p);
    }
    for (int k = 0; k < 40; k++) CHECK(pthread_setspecific(keys[k], (void *)(id + 1)) == 0);
    return NULL;
}

int main(void) {
    for (int k = 0; k < 40; k++) {
        if (pthread_key_create(&keys[k], NULL) != 0) {
            wr(1, "FAIL: pthread_key_create\n");
            return 1;
        }
    }
    wr(1, "40 keys created\n");
    char *p = malloc(100);
    CHECK(p);
    memset(p, 1, 100);
    keep(p);
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    for (int i = 0; i < 8; i++) CHECK(pthread_join(t[i], NULL) == 0);
    free(p);
    printf("lc_keys ok\n");
    return 0;
}
