/* pcpalloc_get (tests/hour2_api.rs): a setting's value as the report shows
 * it, the errors, and a value cut to fit. */
#include "common.h"
#include <dlfcn.h>

static int (*pcpalloc_get)(const char *name, char *buf, size_t len);
static int (*pcpalloc_set)(const char *name, const char *value);

int main(void) {
    pcpalloc_get = (int (*)(const char *, char *, size_t))dlsym(RTLD_DEFAULT, "pcpalloc_get");
    pcpalloc_set = (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "pcpalloc_set");
    CHECK(pcpalloc_get && pcpalloc_set);
    char buf[64];
    CHECK(pcpalloc_get("PCPALLOC_DECAY_MS", buf, sizeof buf) == 0);
    CHECK(strcmp(buf, "1000") == 0);
    CHECK(pcpalloc_set("decay_ms", "250") == 0);
    CHECK(pcpalloc_get("decay_ms", buf, sizeof buf) == 0);
    CHECK(strcmp(buf, "250") == 0);
    CHECK(pcpalloc_get("memory_limit", buf, sizeof buf) == 0);
    CHECK(strcmp(buf, "none") == 0);
    CHECK(pcpalloc_get("PCPALLOC_NOPE", buf, sizeof buf) == ENOENT);
    CHECK(pcpalloc_get(NULL, buf, sizeof buf) == EINVAL);
    CHECK(pcpalloc_get("decay_ms", buf, 0) == EINVAL);
    CHECK(pcpalloc_get("decay_ms", buf, 3) == ERANGE);
    CHECK(strcmp(buf, "25") == 0);
    puts("api_get ok");
    return 0;
}
