/* pcpalloc's own entry points in libpcpalloc.so. Everything else it
 * exports is the standard malloc family (and C++'s operator new/delete). */
#ifndef PCPALLOC_H
#define PCPALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads one counter of the report by name ("allocated_bytes",
 * "resident_bytes", "free_high", ...) into *value. Returns 0, ENOENT for an
 * unknown name, EINVAL for a null argument or a value that is not a number.
 * Takes a stats snapshot: not for a hot loop. */
int pcpalloc_stat(const char *name, uint64_t *value);

/* Writes the report (what PCPALLOC_STATS=1 prints at exit: two summary
 * lines starting with '#', then "name value" lines) through
 * write(ctx, text, len), in chunks of whole lines. No lock is held during a
 * call, so write may allocate. Returns 0, or EINVAL if write is NULL. */
int pcpalloc_report(void (*write)(void *ctx, const char *text, size_t len), void *ctx);

/* Changes a setting while the program runs. name is its variable
 * ("PCPALLOC_DECAY_MS") or the Rust Config method's name ("decay_ms");
 * value is the text the environment would give ("500"), parsed by the same
 * code. These can change at run time: PCPALLOC_DECAY_MS,
 * PCPALLOC_HEURISTICS, PCPALLOC_FREE_COUNT, PCPALLOC_FREE_HIGH_THRESHOLD,
 * PCPALLOC_BATCH_SCALE_MAX, PCPALLOC_MEMORY_LIMIT (lowered below what the
 * heap holds, it takes nothing back: later requests fail until enough is
 * freed), PCPALLOC_STATS and PCPALLOC_PROFILE. Returns 0; ENOENT for an
 * unknown name; EPERM for a setting read only at start (PCPALLOC_PCP,
 * PCPALLOC_HIGH_FRACTION, PCPALLOC_BACKGROUND, PCPALLOC_STATS_FILE,
 * PCPALLOC_TRACE, PCPALLOC_STEAL, PCPALLOC_PROFILE_FILE); EINVAL for a
 * NULL argument or a refused value; ENOSYS if the allocator could not
 * start. Prints nothing.
 *
 * mallopt() maps Android's M_DECAY_TIME (-1, 0, 1, or 10..60000 ms) to
 * PCPALLOC_DECAY_MS and M_PURGE / M_PURGE_ALL to malloc_trim(0), returning
 * 1; every other parameter (M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD,
 * M_MMAP_MAX, M_ARENA_MAX, M_ARENA_TEST, M_MXFAST, M_CHECK_ACTION,
 * M_PERTURB) has no counterpart and returns 0. */
int pcpalloc_set(const char *name, const char *value);

/* The library's version, e.g. "0.1.0" (a static string). */
const char *pcpalloc_version(void);

/* Gives back what the calling thread caches (free objects on its bins,
 * cached large blocks, parked empty slabs) and collects what other threads
 * freed of its objects; the thread keeps its heap (jemalloc's
 * thread.tcache.flush). */
void pcpalloc_thread_flush(void);

/* The calling thread's byte counters (jemalloc's thread.allocated and
 * thread.deallocated), read from counters its heap keeps on slow paths:
 * allocated grows by whole bin refills (objects taken off slabs for the
 * thread to hand out) and by every block above 8 KiB; deallocated by bin
 * flushes, frees of other threads' objects and every block above 8 KiB
 * freed; cached is what waits on the thread's bins. allocated - deallocated
 * - cached is exact at any moment: what the thread allocated and did not
 * free itself. Blocks above 4 MiB are not counted per thread. A thread that
 * took over an exited thread's heap starts from its counts: compare two
 * readings. */
struct pcpalloc_thread_stats {
    uint64_t allocated;
    uint64_t deallocated;
    uint64_t cached;
};

/* Fills *out with the calling thread's counters. Returns 0, or EINVAL for a
 * NULL out. */
int pcpalloc_thread_stats(struct pcpalloc_thread_stats *out);

/* Writes the heap profile (PCPALLOC_PROFILE=1: sampled allocations with
 * their call stacks, in pprof's format) now: to path (each %p becomes the
 * process id), or for NULL to the PCPALLOC_PROFILE_FILE path followed by
 * ".1", ".2"... Returns 0, or an errno: the file's creation's, EIO for a
 * failed write, ENOSYS if the allocator could not start. Does not
 * allocate. An empty profile is written when nothing was sampled. */
int pcpalloc_profile_dump(const char *path);

#ifdef __cplusplus
}
#endif

#endif
