/*
 * hello: a first libshoal program. Connects to a cluster, writes a file,
 * reads it back, lists its directory with readdirplus (names and attributes
 * in batches, like ls -l) and prints the cluster's capacity.
 *
 *   cc hello.c $(pkg-config --cflags --libs shoal) -o hello
 *   ./hello CLUSTER.toml [DIR]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <shoal.h>

static int fail(const char *what)
{
    fprintf(stderr, "hello: %s: %s (%s)\n", what, strerror(errno), shoal_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s CLUSTER.toml [DIR]\n", argv[0]);
        return 2;
    }
    const char *dir = argc == 3 ? argv[2] : "/examples";
    char path[4096];
    snprintf(path, sizeof path, "%s/hello.txt", dir);

    if (shoal_connect(argv[1]) < 0)
        return fail("connect");
    if (shoal_mkdir(dir, 0755) < 0 && errno != EEXIST)
        return fail(dir);

    const char *text = "Hello from C, through libshoal.\n";
    int fd = shoal_open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0)
        return fail(path);
    if (shoal_write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        return fail("write");
    char back[128] = {0};
    ssize_t n = shoal_pread(fd, back, sizeof back - 1, 0);
    if (n < 0)
        return fail("pread");
    if (shoal_fsync(fd) < 0 || shoal_close(fd) < 0)
        return fail("fsync/close");
    printf("read back %zd bytes: %s", n, back);

    int d = shoal_opendir(dir);
    if (d < 0)
        return fail(dir);
    struct shoal_dirent ent;
    struct stat st;
    int more;
    printf("%s:\n", dir);
    while ((more = shoal_readdirplus(d, &ent, &st)) == 1)
        printf("  %06o %5u %5u %10lld %s\n", (unsigned)st.st_mode, (unsigned)st.st_uid,
               (unsigned)st.st_gid, (long long)st.st_size, ent.d_name);
    if (more < 0)
        return fail("readdirplus");
    shoal_closedir(d);

    struct statvfs vfs;
    if (shoal_statvfs("/", &vfs) < 0)
        return fail("statvfs");
    printf("capacity: %llu MiB, %llu MiB free\n",
           (unsigned long long)(vfs.f_blocks * vfs.f_frsize >> 20),
           (unsigned long long)(vfs.f_bavail * vfs.f_frsize >> 20));
    return shoal_disconnect() < 0 ? fail("disconnect") : 0;
}
