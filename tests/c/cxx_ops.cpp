// C++'s operators under LD_PRELOAD=libpcpalloc.so: plain, array, sized,
// aligned and nothrow new/delete reach pcpalloc (its counters, read with
// pcpalloc_stat, see them), a new that cannot be satisfied calls the
// new_handler and then throws std::bad_alloc, and nothrow new returns null.
// Run with PCPALLOC_STATS=1 (the C++ calls are counted only then).
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,       \
                         __LINE__, #cond);                                     \
            std::exit(1);                                                      \
        }                                                                      \
    } while (0)

struct alignas(128) Wide {
    char bytes[300];
};

struct Node {
    long value;
    Node *next;
};

static int (*stat_fn)(const char *, uint64_t *);

static uint64_t stat(const char *name) {
    uint64_t v = 0;
    CHECK(stat_fn(name, &v) == 0);
    return v;
}

static int handler_calls;
// Where results go, so the compiler cannot elide an allocation.
static void *volatile sink;

static void handler() {
    // A real handler would free a reserve; this one gives up after two
    // tries, so the next failure throws.
    if (++handler_calls == 2) std::set_new_handler(nullptr);
}

int main() {
    stat_fn = (int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "pcpalloc_stat");
    CHECK(stat_fn != nullptr);
    uint64_t new0 = stat("cxx_new"), sized0 = stat("cxx_delete_sized");
    uint64_t anew0 = stat("cxx_new_aligned"), adel0 = stat("cxx_delete_aligned");

    // Plain new and sized delete (GCC passes the size from C++14 on).
    for (int i = 0; i < 1000; i++) {
        Node *n = new Node{i, nullptr};
        CHECK(n->value == i);
        delete n;
    }
    int *arr = new int[1000];
    std::memset(arr, 1, 1000 * sizeof(int));
    delete[] arr;
    std::vector<std::string> words;
    for (int i = 0; i < 2000; i++) words.push_back(std::string(40 + i % 100, 'x'));
    words.clear();
    words.shrink_to_fit();

    // Aligned new and delete (over-aligned type).
    for (int i = 0; i < 100; i++) {
        Wide *w = new Wide;
        CHECK(((uintptr_t)w & 127) == 0);
        std::memset(w->bytes, 2, sizeof w->bytes);
        delete w;
    }
    Wide *ws = new Wide[5];
    CHECK(((uintptr_t)ws & 127) == 0);
    delete[] ws;

    uint64_t news = stat("cxx_new") - new0, sized = stat("cxx_delete_sized") - sized0;
    uint64_t anews = stat("cxx_new_aligned") - anew0, adels = stat("cxx_delete_aligned") - adel0;
    std::printf("cxx_new %llu cxx_delete_sized %llu cxx_new_aligned %llu cxx_delete_aligned %llu\n",
                (unsigned long long)news, (unsigned long long)sized, (unsigned long long)anews,
                (unsigned long long)adels);
    CHECK(news >= 3000);
    CHECK(sized >= 1000);
    CHECK(anews >= 101);
    CHECK(adels >= 101);

    // nothrow new of an impossible size returns null.
    volatile size_t huge = (size_t)1 << 60;
    void *p = ::operator new(huge, std::nothrow);
    CHECK(p == nullptr);
    p = ::operator new(huge, std::align_val_t(64), std::nothrow);
    CHECK(p == nullptr);

    // new of an impossible size: the handler runs, then bad_alloc.
    std::set_new_handler(handler);
    bool caught = false;
    try {
        sink = new char[huge];
    } catch (const std::bad_alloc &e) {
        caught = true;
        std::printf("caught std::bad_alloc (%s) after %d handler calls\n", e.what(), handler_calls);
    }
    CHECK(caught);
    CHECK(handler_calls == 2);

    // And with no handler at all, aligned too.
    caught = false;
    try {
        sink = new Wide[huge / sizeof(Wide)];
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK(caught);

    std::printf("cxx_ops ok\n");
    return 0;
}
