/* getdents64 with a buffer too small for the listing, a seek back to 0,
 * then the whole listing: prints how many entries it saw (each must come
 * once). Usage: getdents_rewind DIR */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    int fd = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    char small[64], buf[4096];
    if (getdents64(fd, small, sizeof small) <= 0 || lseek(fd, 0, SEEK_SET) != 0) {
        perror("getdents64 or lseek");
        return 1;
    }
    long entries = 0;
    ssize_t n;
    while ((n = getdents64(fd, buf, sizeof buf)) > 0)
        for (ssize_t at = 0; at < n; at += ((struct dirent64 *)(buf + at))->d_reclen)
            entries++;
    if (n < 0) {
        perror("getdents64");
        return 1;
    }
    printf("%ld\n", entries);
    return close(fd);
}
