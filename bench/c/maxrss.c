/* maxrss: runs a program and prints its peak resident set, as
 * /usr/bin/time's %M does: `maxrss [NAME=VALUE]... -- PROGRAM [ARGS]...`
 * sets the variables for the program only, forks, execs it, waits with
 * wait4 and prints "maxrss_kib N" and "status N" (its exit status, or 128
 * + the signal that ended it).
 *
 * Why a program of its own: a process's ru_maxrss (and getrusage's
 * RUSAGE_CHILDREN, the most over every child ever waited for) starts from
 * the peak of the memory its exec replaced, so a child that a large
 * process forks or vforks reports at least that process's size. Forked
 * from this small process, the child starts from this one's (about
 * 1 MiB: what /bin/true measures). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "maxrss: %s: not NAME=VALUE\n", argv[i]);
            return 2;
        }
        *eq = 0;
        if (setenv(argv[i], eq + 1, 1) != 0) return 2;
        *eq = '=';
    }
    if (i + 1 >= argc) {
        fprintf(stderr, "usage: maxrss [NAME=VALUE]... -- PROGRAM [ARGS]...\n");
        return 2;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        execvp(argv[i + 1], argv + i + 1);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) return 2;
    printf("maxrss_kib %ld\n", ru.ru_maxrss);
    printf("status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return 0;
}
