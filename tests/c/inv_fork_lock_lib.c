/* Issue 42, case B: a shared library that the program links, with a lock
 * of its own, M, held across fork by its handlers (prepare takes it, parent
 * and child release it: the usual way a library keeps its state whole in
 * the child), and a function that allocates and frees under M. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t M = PTHREAD_MUTEX_INITIALIZER;
static void *table[32];
static unsigned seed = 1;

static void prepare(void) { pthread_mutex_lock(&M); }
static void release(void) { pthread_mutex_unlock(&M); }

__attribute__((constructor)) static void init(void) {
    pthread_atfork(prepare, release, release);
}

/* One step of the library's work under M: replaces a block of its table
 * with one of a size between 16 bytes and 4 MiB, so that the allocator's
 * every path (and its locks) is taken with M held. */
void inv_fork_lock_lib_work(void) {
    pthread_mutex_lock(&M);
    seed = seed * 1103515245 + 12345;
    unsigned i = (seed >> 8) % 32;
    size_t n;
    switch ((seed >> 16) % 8) {
    case 0: n = (seed >> 4) % (4u << 20) + 1; break;
    case 1:
    case 2: n = (seed >> 4) % 300000 + 1; break;
    default: n = (seed >> 4) % 2000 + 16; break;
    }
    free(table[i]);
    table[i] = malloc(n);
    if (!table[i]) abort();
    memset(table[i], 3, n < 256 ? n : 256);
    pthread_mutex_unlock(&M);
}
