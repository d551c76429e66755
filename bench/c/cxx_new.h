/* C++ allocation operators for the C versions of benchmarks whose published
 * program is C++ (larson, cache-scratch, malloc-large, alloc-test): they
 * call operator new[] / delete[] (and sized or scalar delete), which an
 * allocator preloaded as a drop-in usually defines itself (pcpalloc,
 * mimalloc, jemalloc and tcmalloc do) and which otherwise come from
 * libstdc++ and call malloc / free. Here each symbol is looked up once: the
 * preloaded library's definition is called when there is one, malloc or
 * free otherwise, so the allocator sees the same entry points as under the
 * C++ program. Call cxx_init() in main before any thread starts. */
#ifndef CXX_NEW_H
#define CXX_NEW_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *(*cxx_new_array_fn)(size_t);       /* operator new[](size_t) */
static void (*cxx_delete_array_fn)(void *);     /* operator delete[](void*) */
static void (*cxx_delete_array_sized_fn)(void *, size_t); /* delete[](void*, size_t) */
static void (*cxx_delete_fn)(void *);           /* operator delete(void*) */

static void cxx_init(void) {
    cxx_new_array_fn = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znam");
    cxx_delete_array_fn = (void (*)(void *))dlsym(RTLD_DEFAULT, "_ZdaPv");
    cxx_delete_array_sized_fn = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdaPvm");
    cxx_delete_fn = (void (*)(void *))dlsym(RTLD_DEFAULT, "_ZdlPv");
}

/* new char[n]: throws (here: exits) instead of returning NULL. */
static inline char *cxx_new_array(size_t n) {
    void *p = cxx_new_array_fn ? cxx_new_array_fn(n) : malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return (char *)p;
}

static inline void cxx_delete_array(void *p) {
    if (cxx_delete_array_fn)
        cxx_delete_array_fn(p);
    else
        free(p);
}

/* operator delete[](p, n), as C++14 sized deallocation calls it; libstdc++'s
 * own definition ignores the size and frees. */
static inline void cxx_delete_array_sized(void *p, size_t n) {
    if (cxx_delete_array_sized_fn)
        cxx_delete_array_sized_fn(p, n);
    else
        cxx_delete_array(p);
}

static inline void cxx_delete(void *p) {
    if (cxx_delete_fn)
        cxx_delete_fn(p);
    else
        free(p);
}
#endif
