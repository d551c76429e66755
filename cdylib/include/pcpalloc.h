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

/* Writes the report (what PCPALLOC_STATS=1 prints at exit) through
 * write(ctx, text, len), in chunks of whole lines. No lock is held during a
 * call, so write may allocate. Returns 0, or EINVAL if write is NULL. */
int pcpalloc_report(void (*write)(void *ctx, const char *text, size_t len), void *ctx);

#ifdef __cplusplus
}
#endif

#endif
