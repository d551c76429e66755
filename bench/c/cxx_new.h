/* C++ allocation operators for the C versions of benchmarks whose published
 * program is C++ (larson, cache-scratch, malloc-large, alloc-test), so that
 * the allocator is loaded and called as under the C++ program:
 *
 * - cxx_init() loads libstdc++ (dlopen, RTLD_GLOBAL), which a C++ program
 *   has loaded from the start: its start-up allocates what it allocates
 *   there (the exception emergency pool), and its operators are there to
 *   be called when the preloaded allocator does not define its own.
 * - Each operator is looked up once in the global scope, in the order a
 *   C++ program's calls are bound: the preloaded allocator's definition
 *   when it has one (pcpalloc, mimalloc, jemalloc and tcmalloc do), else
 *   libstdc++'s, which calls malloc / free. Without libstdc++, malloc and
 *   free stand in.
 * - A call goes through a one-jump stub (a tail call through the looked-up
 *   pointer), as a C++ program's call goes through its PLT entry, so the
 *   program's own instructions per call are the same too. A delete
 *   expression tests the pointer for NULL before calling the operator, as
 *   g++ emits it; an explicit operator call (larson-sized's
 *   operator delete[](p, size)) does not. operator new throws rather than
 *   return NULL, so nothing tests its result.
 *
 * Call cxx_init() in main before any thread starts. */
#ifndef CXX_NEW_H
#define CXX_NEW_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *cxx_fallback_new(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}
static void cxx_fallback_delete(void *p) { free(p); }
static void cxx_fallback_delete_sized(void *p, size_t n) {
    (void)n;
    free(p);
}

static void *(*cxx_new_array_fn)(size_t) = cxx_fallback_new;       /* _Znam */
static void *(*cxx_new_fn)(size_t) = cxx_fallback_new;             /* _Znwm */
static void (*cxx_delete_array_fn)(void *) = cxx_fallback_delete;  /* _ZdaPv */
static void (*cxx_delete_array_sized_fn)(void *, size_t) = cxx_fallback_delete_sized; /* _ZdaPvm */
static void (*cxx_delete_sized_fn)(void *, size_t) = cxx_fallback_delete_sized;       /* _ZdlPvm */

static void cxx_init(void) {
    dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL);
    void *f;
    if ((f = dlsym(RTLD_DEFAULT, "_Znam"))) cxx_new_array_fn = (void *(*)(size_t))f;
    if ((f = dlsym(RTLD_DEFAULT, "_Znwm"))) cxx_new_fn = (void *(*)(size_t))f;
    if ((f = dlsym(RTLD_DEFAULT, "_ZdaPv"))) cxx_delete_array_fn = (void (*)(void *))f;
    if ((f = dlsym(RTLD_DEFAULT, "_ZdaPvm"))) cxx_delete_array_sized_fn = (void (*)(void *, size_t))f;
    if ((f = dlsym(RTLD_DEFAULT, "_ZdlPvm"))) cxx_delete_sized_fn = (void (*)(void *, size_t))f;
}

/* The stubs: one indirect jump each, like a PLT entry. */
__attribute__((noinline)) static void *cxx_op_new_array(size_t n) { return cxx_new_array_fn(n); }
__attribute__((noinline)) static void *cxx_op_new(size_t n) { return cxx_new_fn(n); }
__attribute__((noinline)) static void cxx_op_delete_array(void *p) { cxx_delete_array_fn(p); }
__attribute__((noinline)) static void cxx_op_delete_array_sized(void *p, size_t n) {
    cxx_delete_array_sized_fn(p, n);
}
__attribute__((noinline)) static void cxx_op_delete_sized(void *p, size_t n) { cxx_delete_sized_fn(p, n); }

/* new char[n] */
static inline char *cxx_new_array(size_t n) { return (char *)cxx_op_new_array(n); }

/* new T (scalar), n = sizeof(T) */
static inline void *cxx_new(size_t n) { return cxx_op_new(n); }

/* delete[] p (a delete expression: nothing for NULL) */
static inline void cxx_delete_array(void *p) {
    if (p) cxx_op_delete_array(p);
}

/* operator delete[](p, n), called explicitly (C++14 sized deallocation). */
static inline void cxx_delete_array_sized(void *p, size_t n) { cxx_op_delete_array_sized(p, n); }

/* delete p of a complete type of size n: g++ (C++14 and later) calls the
 * sized operator delete(void*, size_t); nothing for NULL. */
static inline void cxx_delete_sized(void *p, size_t n) {
    if (p) cxx_op_delete_sized(p, n);
}
#endif
