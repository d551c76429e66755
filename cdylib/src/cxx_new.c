/* C++'s operator new, in C so that it can throw std::bad_alloc.
 *
 * The allocator is built with panic=abort, so no Rust frame may be on the
 * stack while a C++ exception unwinds; this file is compiled with unwind
 * tables (-fexceptions) and the exported operator symbols jump here
 * directly (see cxx.rs). libstdc++'s pieces (the new_handler, the
 * exception machinery, bad_alloc's type info and vtable) are looked up with
 * dlsym: a program that calls operator new has libstdc++ loaded.
 *
 * C++ semantics: new never returns null. On failure it calls the installed
 * new_handler and retries; with no handler it throws std::bad_alloc. The
 * nothrow variants return null instead, without calling the handler (C
 * cannot catch what a handler throws). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

/* From the Rust side: size bytes aligned to align (0 for the default), or
 * null. */
__attribute__((visibility("hidden"))) void *pcpalloc_cxx_alloc(size_t size, size_t align);

typedef void (*new_handler_fn)(void);

static void *lookup(const char *name) {
    return dlsym(RTLD_DEFAULT, name);
}

static new_handler_fn current_new_handler(void) {
    new_handler_fn (*get)(void) = (new_handler_fn (*)(void))lookup("_ZSt15get_new_handlerv");
    return get ? get() : NULL;
}

static void die(const char *msg, size_t len) {
    (void)!write(2, msg, len);
    abort();
}

__attribute__((noreturn)) static void throw_bad_alloc(void) {
    void *(*allocate_exception)(size_t) =
        (void *(*)(size_t))lookup("__cxa_allocate_exception");
    void (*cxa_throw)(void *, void *, void (*)(void *)) =
        (void (*)(void *, void *, void (*)(void *)))lookup("__cxa_throw");
    void *type_info = lookup("_ZTISt9bad_alloc");
    void **vtable = (void **)lookup("_ZTVSt9bad_alloc");
    void (*destructor)(void *) = (void (*)(void *))lookup("_ZNSt9bad_allocD1Ev");
    if (!allocate_exception || !cxa_throw || !type_info || !vtable || !destructor) {
        static const char msg[] = "pcpalloc: operator new: out of memory, and std::bad_alloc cannot be thrown\n";
        die(msg, sizeof msg - 1);
    }
    /* A std::bad_alloc is one pointer: its vtable's address point, two
     * slots (offset-to-top, type info) into the vtable symbol. */
    void **e = allocate_exception(sizeof(void *));
    e[0] = vtable + 2;
    cxa_throw(e, type_info, destructor);
    abort();
}

/* After an allocation of size bytes aligned to align (0: the default)
 * failed: the new_handler, and retries, until one succeeds or there is no
 * handler left (then std::bad_alloc). */
void *pcpalloc_cxx_new_failed(size_t size, size_t align) {
    for (;;) {
        new_handler_fn h = current_new_handler();
        if (!h)
            throw_bad_alloc();
        h();
        void *p = pcpalloc_cxx_alloc(size, align);
        if (p)
            return p;
    }
}

void *pcpalloc_cxx_new(size_t size, size_t align) {
    void *p = pcpalloc_cxx_alloc(size, align);
    if (p)
        return p;
    return pcpalloc_cxx_new_failed(size, align);
}

void *pcpalloc_cxx_new_nothrow(size_t size, size_t align) {
    return pcpalloc_cxx_alloc(size, align);
}
