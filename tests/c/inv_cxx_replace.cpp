// Issue 42, case C (1): a program that replaces only operator new(size_t)
// and operator delete(void*), each block behind a 16-byte header of its
// own (as a leak checker or an arena would). libstdc++ forwards every
// other form to these two — array, sized, nothrow — so the standard
// containers, new[]/delete[] and nothrow new must run clean, and every
// block the replacement handed out must come back to it, header intact.
// With -DINV_CXX_EARLY it is linked against inv_cxx_early_lib.cpp, whose
// static constructor does the same before the program (and, under
// LD_PRELOAD, before libpcpalloc.so's constructor) runs.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <unistd.h>
#include <unordered_map>
#include <vector>

static const std::uint64_t MAGIC = 0x5eed0f0b10c4ea0dULL;
struct Header {
    std::uint64_t magic;
    std::uint64_t size;
};
static std::atomic<long> news{0}, deletes{0};

static void die(const char *msg) {
    (void)!write(2, msg, std::strlen(msg));
    std::abort();
}

void *operator new(std::size_t n) {
    Header *h = static_cast<Header *>(std::malloc(n + sizeof(Header)));
    if (!h) throw std::bad_alloc();
    h->magic = MAGIC;
    h->size = n;
    news.fetch_add(1, std::memory_order_relaxed);
    return h + 1;
}

void operator delete(void *p) noexcept {
    if (!p) return;
    Header *h = static_cast<Header *>(p) - 1;
    if (h->magic != MAGIC) die("inv_cxx_replace: operator delete(void*) got a block without our header\n");
    h->magic = 0;
    deletes.fetch_add(1, std::memory_order_relaxed);
    std::free(h);
}

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,       \
                         __LINE__, #cond);                                     \
            std::exit(1);                                                      \
        }                                                                      \
    } while (0)

// Keeps the compiler from eliding a new/delete pair.
static inline void keep(const void *p) { __asm__ volatile("" : : "g"(p) : "memory"); }

struct Counted {
    long v;
    explicit Counted(long x = 0) : v(x) {}
    ~Counted() { v = -1; }
};

static long containers() {
    long sum = 0;
    std::vector<int> v;
    for (int i = 0; i < 10000; i++) v.push_back(i);
    v.shrink_to_fit();
    for (int x : v) sum += x;
    std::string s;
    for (int i = 0; i < 200; i++) s += "a long enough string to leave the small buffer ";
    sum += static_cast<long>(s.size());
    std::map<int, std::string> m;
    for (int i = 0; i < 2000; i++) m[i] = std::to_string(i) + " and a tail past the SSO";
    m.erase(m.begin(), m.find(1000));
    sum += static_cast<long>(m.size());
    std::unordered_map<long, std::vector<long>> u;
    for (long i = 0; i < 3000; i++) u[i % 700].push_back(i);
    u.rehash(4096);
    sum += static_cast<long>(u.size());
    auto sp = std::make_shared<Counted>(5);
    std::shared_ptr<Counted> sp2(new Counted(6));
    std::weak_ptr<Counted> w = sp;
    sum += sp->v + sp2->v + w.use_count();
    std::unique_ptr<Counted[]> arr(new Counted[3]{Counted(1), Counted(2), Counted(3)});
    sum += arr[2].v;
    return sum;
}

#ifdef INV_CXX_EARLY
long inv_cxx_early_lib_work();
#endif

int main() {
#ifdef INV_CXX_EARLY
    CHECK(inv_cxx_early_lib_work() == 1250);
#endif
    long before = news.load();
    long sum = containers();
    CHECK(sum > 0);

    int *ints = new int[1000];
    keep(ints);
    ints[999] = 1;
    delete[] ints;
    Counted *objs = new Counted[50];
    keep(objs);
    delete[] objs;
    char *one = new char;
    keep(one);
    delete one;
    void *raw = ::operator new(300);
    keep(raw);
    ::operator delete(raw, 300);
    void *raw_arr = ::operator new[](500);
    keep(raw_arr);
    ::operator delete[](raw_arr, 500);
    int *nt = new (std::nothrow) int(7);
    CHECK(nt && *nt == 7);
    delete nt;
    long *nt_arr = new (std::nothrow) long[40];
    CHECK(nt_arr);
    keep(nt_arr);
    delete[] nt_arr;
    void *nt_raw = ::operator new(64, std::nothrow);
    CHECK(nt_raw);
    ::operator delete(nt_raw, std::nothrow);
    void *nt_raw_arr = ::operator new[](64, std::nothrow);
    CHECK(nt_raw_arr);
    ::operator delete[](nt_raw_arr, std::nothrow);

    // The replacement throws where malloc fails: through new[] the throw
    // reaches the caller, through the nothrow forms it becomes null.
    const std::size_t huge = SIZE_MAX / 4;
    bool caught = false;
    try {
        keep(::operator new[](huge));
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK(caught);
    CHECK(::operator new(huge, std::nothrow) == nullptr);
    CHECK(::operator new[](huge, std::nothrow) == nullptr);

    long n = news.load(), d = deletes.load();
    if (n - before < 1000 || n != d) {
        std::fprintf(stderr, "replaced new saw %ld blocks (%ld here), replaced delete %ld\n", n,
                     n - before, d);
        return 1;
    }
    std::printf("inv_cxx_replace ok (%ld blocks)\n", n - before);
    return 0;
}
