/* Sampled small objects handed to another thread: a producer thread
 * allocates 64 MiB in 64-byte objects at one site (`produce`) and hands
 * them all to a consumer thread, which frees three in four of them; the
 * profile written then must hold the site's 16 MiB, and the one written
 * after the consumer frees the rest must hold nothing of it. With
 * `double`, the consumer then frees object N again (argv[3]), which must
 * abort as a double free, sampled or not.
 *
 *   prof_handoff DIR            writes DIR/held.pb and DIR/none.pb
 *   prof_handoff DIR double N */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OBJECTS (1 << 20) /* 64 MiB of 64 B */

static void **objs;
static int (*dump)(const char *);

__attribute__((noinline)) static void *produce(void *arg) {
    (void)arg;
    for (int i = 0; i < OBJECTS; i++) {
        objs[i] = malloc(64);
        if (!objs[i]) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        memset(objs[i], i, 64);
    }
    return NULL;
}

static const char *dir;
static int twice = -1;

static void write_profile(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (dump && dump(path) != 0) {
        fprintf(stderr, "dump %s failed\n", path);
        exit(1);
    }
}

static void *consume(void *arg) {
    (void)arg;
    for (int i = 0; i < OBJECTS; i++) {
        if ((unsigned char)((char *)objs[i])[63] != (unsigned char)i) {
            fprintf(stderr, "object %d corrupted\n", i);
            exit(1);
        }
        if (i % 4 != 0)
            free(objs[i]);
    }
    write_profile("held.pb");
    for (int i = 0; i < OBJECTS; i += 4)
        free(objs[i]);
    write_profile("none.pb");
    if (twice >= 0) {
        fprintf(stderr, "freeing object %d again\n", twice);
        free(objs[twice]);
        fprintf(stderr, "double free not caught\n");
        exit(3);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    dir = argv[1];
    if (argc >= 4 && strcmp(argv[2], "double") == 0)
        twice = atoi(argv[3]);
    dump = (int (*)(const char *))dlsym(RTLD_DEFAULT, "pcpalloc_profile_dump");
    objs = malloc(sizeof(void *) * OBJECTS);
    pthread_t t;
    pthread_create(&t, NULL, produce, NULL);
    pthread_join(t, NULL);
    pthread_create(&t, NULL, consume, NULL);
    pthread_join(t, NULL);
    free(objs);
    printf("prof_handoff ok\n");
    return 0;
}
