/* A program the interposer does not understand: it reads a file with raw
 * system calls (syscall(2)), which no LD_PRELOAD library sees, so under
 * libshoal_preload.so it reaches the FUSE mount underneath. Prints the
 * file's bytes to stdout (with raw write calls too).
 * Usage: raw_syscall FILE */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: raw_syscall FILE\n");
        return 2;
    }
    long fd = syscall(SYS_openat, AT_FDCWD, argv[1], O_RDONLY);
    if (fd < 0) {
        perror("raw openat");
        return 1;
    }
    char buf[65536];
    long n;
    while ((n = syscall(SYS_read, fd, buf, sizeof buf)) > 0)
        if (syscall(SYS_write, 1, buf, n) != n)
            return 1;
    syscall(SYS_close, fd);
    return n < 0;
}
