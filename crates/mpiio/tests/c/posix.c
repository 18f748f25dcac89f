/* The POSIX calls on an MPI-IO file's own fd, checked against the kernel's semantics: opens
 * PATH with MPI_File_open, finds the MPI library's fd in /proc/self/fd, and does pwrite,
 * write/lseek, writev, dup (shared offset), fstat, SEEK_END, pwritev, ftruncate, short pread,
 * read, readv, preadv, fcntl(F_DUPFD), dup2, fsync, a write past the end (a hole), an open
 * of the same path by the program, then closes. Prints every result; a direct run and a logged run must print the same.
 * Usage: posix PATH (one rank) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static void show(const char *what, long r, const char *buf, long n) {
    printf("%s = %ld", what, r);
    if (buf) {
        printf(" [");
        for (long i = 0; i < n; i++) putchar(buf[i] >= 32 && buf[i] < 127 ? buf[i] : '.');
        printf("]");
    }
    printf("\n");
}

static long size_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? (long)st.st_size : -1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_SELF, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh))
        MPI_Abort(MPI_COMM_WORLD, 2);
    char want[PATH_MAX], link[PATH_MAX], p[64];
    if (!realpath(argv[1], want)) MPI_Abort(MPI_COMM_WORLD, 3);
    int fd = -1;
    for (int i = 3; i < 1024 && fd < 0; i++) {
        snprintf(p, sizeof p, "/proc/self/fd/%d", i);
        ssize_t n = readlink(p, link, sizeof link - 1);
        if (n > 0) {
            link[n] = 0;
            if (strcmp(link, want) == 0) fd = i;
        }
    }
    if (fd < 0) { fprintf(stderr, "no fd for %s\n", want); MPI_Abort(MPI_COMM_WORLD, 4); }
    char buf[256];
    show("pwrite", pwrite(fd, "hello", 5, 100), 0, 0);
    show("lseek set", lseek(fd, 10, SEEK_SET), 0, 0);
    show("write", write(fd, "abc", 3), 0, 0);
    show("lseek cur", lseek(fd, 0, SEEK_CUR), 0, 0);
    struct iovec iov[2] = {{"12", 2}, {"345", 3}};
    show("writev", writev(fd, iov, 2), 0, 0);
    int d = dup(fd);
    show("write dup", write(d, "D", 1), 0, 0);
    show("lseek cur after dup write", lseek(fd, 0, SEEK_CUR), 0, 0);
    show("fstat size", size_of(fd), 0, 0);
    show("lseek end", lseek(fd, 0, SEEK_END), 0, 0);
    struct iovec iov2[2] = {{"pw1", 3}, {"pw2!", 4}};
    show("pwritev", pwritev(fd, iov2, 2, 200), 0, 0);
    show("fstat size", size_of(fd), 0, 0);
    show("ftruncate", ftruncate(fd, 150), 0, 0);
    show("fstat size", size_of(d), 0, 0);
    memset(buf, '#', sizeof buf);
    show("pread short", pread(fd, buf, 100, 90), buf + 10, 20);
    show("pread past end", pread(fd, buf, 10, 500), 0, 0);
    show("lseek set", lseek(fd, 0, SEEK_SET), 0, 0);
    memset(buf, '#', sizeof buf);
    long r = read(fd, buf, 20);
    show("read", r, buf, 20);
    char a[4], b[6];
    struct iovec riov[2] = {{a, 4}, {b, 6}};
    r = readv(d, riov, 2);
    memcpy(buf, a, 4);
    memcpy(buf + 4, b, 6);
    show("readv", r, buf, 10);
    show("lseek cur", lseek(fd, 0, SEEK_CUR), 0, 0);
    r = preadv(fd, riov, 2, 98);
    memcpy(buf, a, 4);
    memcpy(buf + 4, b, 6);
    show("preadv", r, buf, 10);
    int f2 = fcntl(fd, F_DUPFD, 100);
    show("fcntl dupfd >= 100", f2 >= 100, 0, 0);
    show("pwrite dupfd", pwrite(f2, "F", 1, 149), 0, 0);
    show("dup2", dup2(fd, 200), 0, 0);
    show("pwrite dup2", pwrite(200, "Z", 1, 0), 0, 0);
    show("close dup2", close(200), 0, 0);
    show("fsync", fsync(fd), 0, 0);
    show("fdatasync", fdatasync(d), 0, 0);
    show("lseek hole", lseek(fd, 1000, SEEK_SET), 0, 0);
    show("write after hole", write(fd, "end", 3), 0, 0);
    show("fstat size", size_of(fd), 0, 0);
    memset(buf, '#', sizeof buf);
    show("pread hole", pread(fd, buf, 16, 995), buf, 16);
    /* the program opens the file by path while MPI has it open: the same file */
    int late = open(argv[1], O_RDWR);
    show("late open", late >= 0, 0, 0);
    show("late pwrite", pwrite(late, "late", 4, 300), 0, 0);
    show("late fstat size", size_of(late), 0, 0);
    show("late close", close(late), 0, 0);
    show("close dup", close(d), 0, 0);
    show("close dupfd", close(f2), 0, 0);
    MPI_Offset sz;
    MPI_File_get_size(fh, &sz);
    show("MPI_File_get_size", (long)sz, 0, 0);
    show("MPI_File_close", MPI_File_close(&fh), 0, 0);
    MPI_Finalize();
    return 0;
}
