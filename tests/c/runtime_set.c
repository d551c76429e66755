/* pcpalloc's own C entry points (include/pcpalloc.h) and mallopt, under
 * LD_PRELOAD: settings changed at run time, the memory limit lowered below
 * what the heap holds, the version, a thread's cache flushed and its byte
 * counters. Found with dlsym, as a program that may run without pcpalloc
 * would. Prints "ok <what>" per step and the report at the end;
 * PCPALLOC_STATS=json was set at run time, so the report at exit is JSON.
 * argv[1] is the version expected. */
#include "common.h"
#include <dlfcn.h>

#include "../../cdylib/include/pcpalloc.h"

#define M_DECAY_TIME (-100)
#define M_PURGE (-101)

static int (*set)(const char *, const char *);
static int (*stat_fn)(const char *, uint64_t *);

static uint64_t stat_of(const char *name) {
    uint64_t v = 0;
    CHECK(stat_fn(name, &v) == 0);
    return v;
}

static void *sym(const char *name) {
    void *p = dlsym(RTLD_DEFAULT, name);
    CHECK(p != NULL);
    return p;
}

int main(int argc, char **argv) {
    require_pcpalloc();
    CHECK(argc == 2);
    set = (int (*)(const char *, const char *))sym("pcpalloc_set");
    stat_fn = (int (*)(const char *, uint64_t *))sym("pcpalloc_stat");
    const char *(*version)(void) = (const char *(*)(void))sym("pcpalloc_version");
    void (*flush)(void) = (void (*)(void))sym("pcpalloc_thread_flush");
    int (*tstats)(struct pcpalloc_thread_stats *) =
        (int (*)(struct pcpalloc_thread_stats *))sym("pcpalloc_thread_stats");

    CHECK(strcmp(version(), argv[1]) == 0);
    puts("ok version");

    /* What can change, and the same refusals as the environment's. */
    CHECK(set("PCPALLOC_DECAY_MS", "250") == 0);
    CHECK(stat_of("PCPALLOC_DECAY_MS") == 250);
    CHECK(set("decay_ms", "300") == 0);
    CHECK(stat_of("PCPALLOC_DECAY_MS") == 300);
    CHECK(set("PCPALLOC_DECAY_MS", "5") == EINVAL);
    CHECK(stat_of("PCPALLOC_DECAY_MS") == 300);
    CHECK(set("PCPALLOC_BATCH_SCALE_MAX", "2") == 0);
    CHECK(stat_of("PCPALLOC_BATCH_SCALE_MAX") == 2);
    CHECK(set("PCPALLOC_BATCH_SCALE_MAX", "9") == EINVAL);
    CHECK(set("PCPALLOC_HEURISTICS", "1,3") == 0);
    CHECK(set("PCPALLOC_HEURISTICS", "1,x") == EINVAL);
    CHECK(set("PCPALLOC_FREE_COUNT", "exact") == 0);
    CHECK(set("PCPALLOC_FREE_HIGH_THRESHOLD", "5batch") == 0);
    CHECK(set("PCPALLOC_PCP", "thread") == EPERM);
    CHECK(set("PCPALLOC_STEAL", "baseline") == EPERM);
    CHECK(set("PCPALLOC_STATS_FILE", "/tmp/x") == EPERM);
    CHECK(set("PCPALLOC_NOT_A_SETTING", "1") == ENOENT);
    CHECK(set(NULL, "1") == EINVAL);
    CHECK(set("PCPALLOC_DECAY_MS", NULL) == EINVAL);
    puts("ok set");

    /* The memory limit, lowered below what the heap holds: nothing breaks,
     * new requests fail until enough is freed. */
    enum { N = 40, MiB = 1 << 20 };
    void *held[N];
    for (int i = 0; i < N; i++) {
        held[i] = malloc(MiB);
        CHECK(held[i] != NULL);
        memset(held[i], i, MiB);
    }
    CHECK(stat_of("charged_bytes") > 16 * MiB);
    CHECK(set("PCPALLOC_MEMORY_LIMIT", "1M") == EINVAL); /* below 4 MiB */
    CHECK(set("PCPALLOC_MEMORY_LIMIT", "16M") == 0);
    CHECK(stat_of("PCPALLOC_MEMORY_LIMIT") == 16 * MiB);
    CHECK(stat_of("memory_limit_bytes") == 16 * MiB);
    errno = 0;
    void *more = malloc(4 * MiB);
    CHECK(more == NULL && errno == ENOMEM);
    for (int i = 0; i < N; i++) {
        unsigned char *c = held[i];
        CHECK(c[0] == (unsigned char)i && c[MiB - 1] == (unsigned char)i);
        free(held[i]);
    }
    more = malloc(4 * MiB);
    CHECK(more != NULL);
    memset(more, 1, 4 * MiB);
    free(more);
    void *small = malloc(100);
    CHECK(small != NULL);
    free(small);
    malloc_trim(0);
    CHECK(stat_of("charged_bytes") <= 16 * MiB);
    CHECK(set("PCPALLOC_MEMORY_LIMIT", "none") == 0);
    CHECK(stat_of("memory_limit_bytes") == 0);
    more = malloc(32 * MiB);
    CHECK(more != NULL);
    memset(more, 1, 32 * MiB);
    free(more);
    puts("ok memory limit");

    /* mallopt: 1 for what maps, 0 for what is ignored. */
    CHECK(mallopt(M_DECAY_TIME, 0) == 1);
    CHECK(stat_of("PCPALLOC_DECAY_MS") == 10);
    CHECK(mallopt(M_DECAY_TIME, 1) == 1);
    CHECK(stat_of("PCPALLOC_DECAY_MS") == 1000);
    CHECK(mallopt(M_DECAY_TIME, 500) == 1);
    CHECK(stat_of("PCPALLOC_DECAY_MS") == 500);
    CHECK(mallopt(M_DECAY_TIME, 5) == 0);
    CHECK(mallopt(M_DECAY_TIME, 70000) == 0);
    CHECK(stat_of("PCPALLOC_DECAY_MS") == 500);
    CHECK(mallopt(M_PURGE, 0) == 1);
    CHECK(mallopt(M_TRIM_THRESHOLD, 128 * 1024) == 0);
    CHECK(mallopt(M_TOP_PAD, 0) == 0);
    CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 0);
    CHECK(mallopt(M_MMAP_MAX, 0) == 0);
    CHECK(mallopt(M_ARENA_MAX, 1) == 0);
    CHECK(mallopt(M_ARENA_TEST, 1) == 0);
    CHECK(mallopt(M_MXFAST, 0) == 0);
    CHECK(mallopt(M_CHECK_ACTION, 3) == 0);
    CHECK(mallopt(M_PERTURB, 0x55) == 0);
    puts("ok mallopt");

    /* The thread's counters: 1000 objects of 64 B (a size class of its
     * own) move allocated - deallocated - cached by exactly 64000. */
    struct pcpalloc_thread_stats a, b, c;
    CHECK(tstats(NULL) == EINVAL);
    CHECK(tstats(&a) == 0);
    static void *objs[1000];
    for (int i = 0; i < 1000; i++) objs[i] = malloc(64);
    CHECK(tstats(&b) == 0);
    int64_t net_a = (int64_t)a.allocated - (int64_t)a.deallocated - (int64_t)a.cached;
    int64_t net_b = (int64_t)b.allocated - (int64_t)b.deallocated - (int64_t)b.cached;
    CHECK(net_b - net_a == 64000);
    CHECK(b.allocated >= a.allocated + 64000);
    for (int i = 0; i < 1000; i++) free(objs[i]);
    flush();
    CHECK(tstats(&c) == 0);
    int64_t net_c = (int64_t)c.allocated - (int64_t)c.deallocated - (int64_t)c.cached;
    CHECK(net_c == net_a);
    CHECK(c.cached == 0);
    CHECK(c.deallocated >= b.deallocated + 64000);
    puts("ok thread stats");

    CHECK(set("PCPALLOC_STATS", "json") == 0);
    puts("ok stats json");
    return 0;
}
