// Issue 42, case C (2): a program that replaces only the aligned pair,
// operator new(size_t, align_val_t) and operator delete(void*,
// align_val_t), each block behind a header of its own. libstdc++ forwards
// the aligned array, sized and nothrow forms to these two, so containers
// of over-aligned types, new[]/delete[] and nothrow new of them must run
// clean, and every block the replacement handed out must come back to it.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <unistd.h>
#include <vector>

static const std::uint64_t MAGIC = 0xa119ed0b10c4ea0dULL;
struct Header {
    std::uint64_t magic;
    std::uint64_t align;
};
static std::atomic<long> news{0}, deletes{0};

static void die(const char *msg) {
    (void)!write(2, msg, std::strlen(msg));
    std::abort();
}

// The block starts `align` bytes (at least a header's) before the pointer
// handed out; the header sits just below the pointer.
void *operator new(std::size_t n, std::align_val_t al) {
    std::size_t a = static_cast<std::size_t>(al);
    std::size_t pad = a < sizeof(Header) ? sizeof(Header) : a;
    char *base = static_cast<char *>(std::aligned_alloc(a, (pad + n + a - 1) / a * a));
    if (!base) throw std::bad_alloc();
    Header *h = reinterpret_cast<Header *>(base + pad) - 1;
    h->magic = MAGIC;
    h->align = a;
    news.fetch_add(1, std::memory_order_relaxed);
    return base + pad;
}

void operator delete(void *p, std::align_val_t al) noexcept {
    if (!p) return;
    Header *h = static_cast<Header *>(p) - 1;
    std::size_t a = static_cast<std::size_t>(al);
    if (h->magic != MAGIC || h->align != a)
        die("inv_cxx_aligned: operator delete(void*, align_val_t) got a block without our header\n");
    h->magic = 0;
    deletes.fetch_add(1, std::memory_order_relaxed);
    std::size_t pad = a < sizeof(Header) ? sizeof(Header) : a;
    std::free(static_cast<char *>(p) - pad);
}

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,       \
                         __LINE__, #cond);                                     \
            std::exit(1);                                                      \
        }                                                                      \
    } while (0)

static inline void keep(const void *p) { __asm__ volatile("" : : "g"(p) : "memory"); }

struct alignas(64) Line {
    long v[8];
    explicit Line(long x = 0) { v[0] = x; }
    ~Line() { v[0] = -1; }
};

struct alignas(256) Page {
    char bytes[1000];
};

int main() {
    long sum = 0;
    {
        std::vector<Line> lines;
        for (long i = 0; i < 5000; i++) lines.emplace_back(i);
        lines.shrink_to_fit();
        for (const Line &l : lines) {
            CHECK(reinterpret_cast<std::uintptr_t>(&l) % 64 == 0);
            sum += l.v[0];
        }
        std::vector<Page> pages(40);
        CHECK(reinterpret_cast<std::uintptr_t>(pages.data()) % 256 == 0);
        auto sp = std::make_shared<Line>(3);
        std::shared_ptr<Page> sp2(new Page);
        std::unique_ptr<Line> up(new Line(4));
        CHECK(reinterpret_cast<std::uintptr_t>(up.get()) % 64 == 0);
        sum += sp->v[0] + up->v[0] + static_cast<long>(sizeof(sp2->bytes));
    }
    Line *arr = new Line[30];
    CHECK(reinterpret_cast<std::uintptr_t>(arr) % 64 == 0);
    keep(arr);
    delete[] arr;
    Page *parr = new Page[3];
    keep(parr);
    delete[] parr;
    Line *nt = new (std::nothrow) Line(9);
    CHECK(nt && nt->v[0] == 9);
    delete nt;
    Line *nt_arr = new (std::nothrow) Line[7];
    CHECK(nt_arr);
    keep(nt_arr);
    delete[] nt_arr;
    std::align_val_t a128 = static_cast<std::align_val_t>(128);
    void *raw = ::operator new(300, a128);
    keep(raw);
    ::operator delete(raw, 300, a128);
    void *raw_arr = ::operator new[](500, a128);
    keep(raw_arr);
    ::operator delete[](raw_arr, 500, a128);
    void *nt_raw = ::operator new(64, a128, std::nothrow);
    CHECK(nt_raw);
    ::operator delete(nt_raw, a128, std::nothrow);
    void *nt_raw_arr = ::operator new[](64, a128, std::nothrow);
    CHECK(nt_raw_arr);
    ::operator delete[](nt_raw_arr, a128, std::nothrow);
    void *raw_arr2 = ::operator new[](64, a128);
    ::operator delete[](raw_arr2, a128);

    // The replacement throws where aligned_alloc fails: through aligned
    // new[] the throw reaches the caller, through the nothrow forms it
    // becomes null.
    const std::size_t huge = SIZE_MAX / 4;
    bool caught = false;
    try {
        keep(::operator new[](huge, a128));
    } catch (const std::bad_alloc &) {
        caught = true;
    }
    CHECK(caught);
    CHECK(::operator new(huge, a128, std::nothrow) == nullptr);
    CHECK(::operator new[](huge, a128, std::nothrow) == nullptr);

    long n = news.load(), d = deletes.load();
    if (n < 20 || n != d) {
        std::fprintf(stderr, "replaced aligned new saw %ld blocks, replaced aligned delete %ld\n",
                     n, d);
        return 1;
    }
    std::printf("inv_cxx_aligned ok (%ld blocks, sum %ld)\n", n, sum);
    return 0;
}
