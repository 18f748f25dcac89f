/* Does file I/O in a constructor (before main, while the preload library is barely loaded),
 * in a thread, and in a forked child; prints what it read back. Usage: ctor DIR */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char early[64];

__attribute__((constructor)) static void before_main(void) {
    int fd = open("/proc/self/stat", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, early, 8);
        early[n > 0 ? n : 0] = 0;
        close(fd);
    }
}

static void roundtrip(const char *dir, const char *name, const char *text) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (fd < 0) { perror(path); exit(1); }
    if (pwrite(fd, text, strlen(text), 0) != (ssize_t)strlen(text)) { perror("pwrite"); exit(1); }
    int fd2 = dup(fd);
    struct stat st;
    fstat(fd2, &st);
    char buf[256] = {0};
    lseek(fd2, 0, SEEK_SET);
    ssize_t n = read(fd2, buf, sizeof buf - 1);
    fsync(fd);
    close(fd);
    close(fd2);
    printf("%s: size %lld read %zd [%s]\n", name, (long long)st.st_size, n, buf);
    fflush(stdout);
}

static void *thread_main(void *dir) {
    roundtrip(dir, "thread", "from a thread");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    printf("constructor read %zu bytes\n", strlen(early));
    roundtrip(argv[1], "main", "from main");
    pthread_t t;
    pthread_create(&t, NULL, thread_main, argv[1]);
    pthread_join(t, NULL);
    pid_t pid = fork();
    if (pid == 0) {
        roundtrip(argv[1], "child", "from a child");
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    if (system("true") != 0) return 3;
    printf("done %d\n", WEXITSTATUS(status));
    return 0;
}
