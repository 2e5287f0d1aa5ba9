/* MPI test of libshoal_preload.so: every rank writes and reads back a file
 * of its own, then writes its own disjoint blocks of one shared file (rank r
 * owns blocks r, r+P, r+2P, ...), all ranks close, reopen and each checks
 * every block of the shared file, whoever wrote it. Plain POSIX calls
 * (open/pwrite/pread/fstat/close), which the preload library serves.
 * Usage: mpi_io DIR   (DIR: a Shoal directory, e.g. under SHOAL_PREFIX) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK (256 * 1024 + 17) /* not a strip multiple: blocks straddle strips */
#define BLOCKS_PER_RANK 6

static void fill(unsigned char *buf, size_t n, int block) {
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(block * 131 + i * 7 + (i >> 9));
}

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "rank %d: ", rank);                             \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));   \
            MPI_Abort(MPI_COMM_WORLD, 1);                                   \
        }                                                                   \
    } while (0)

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_io DIR\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *dir = argv[1];
    unsigned char *buf = malloc(BLOCK), *back = malloc(BLOCK);
    char path[4096], shared[4096];

    /* 1. A file per rank. */
    snprintf(path, sizeof path, "%s/rank%d.dat", dir, rank);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    CHECK(fd >= 0, "open %s", path);
    for (int b = 0; b < BLOCKS_PER_RANK; b++) {
        fill(buf, BLOCK, 1000 * rank + b);
        CHECK(write(fd, buf, BLOCK) == BLOCK, "write %s", path);
    }
    CHECK(close(fd) == 0, "close %s", path);
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0, "reopen %s", path);
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == (off_t)BLOCK * BLOCKS_PER_RANK,
          "size of %s", path);
    for (int b = 0; b < BLOCKS_PER_RANK; b++) {
        fill(buf, BLOCK, 1000 * rank + b);
        CHECK(read(fd, back, BLOCK) == BLOCK, "read %s", path);
        CHECK(memcmp(buf, back, BLOCK) == 0, "data of %s block %d", path, b);
    }
    close(fd);

    /* 2. Disjoint blocks of one shared file. */
    snprintf(shared, sizeof shared, "%s/shared.dat", dir);
    if (rank == 0) {
        fd = open(shared, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        CHECK(fd >= 0, "create %s", shared);
        close(fd);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    fd = open(shared, O_WRONLY);
    CHECK(fd >= 0, "open %s", shared);
    for (int k = 0; k < BLOCKS_PER_RANK; k++) {
        int b = k * size + rank;
        fill(buf, BLOCK, b);
        CHECK(pwrite(fd, buf, BLOCK, (off_t)b * BLOCK) == BLOCK, "pwrite block %d", b);
    }
    CHECK(fsync(fd) == 0, "fsync %s", shared);
    CHECK(close(fd) == 0, "close %s", shared);
    MPI_Barrier(MPI_COMM_WORLD);
    /* Shoal's clients cache attributes for cache_ttl_ms (100 ms by default):
     * another client's writes show in the size after that long (the data is
     * always read from the servers). */
    usleep(250 * 1000);
    fd = open(shared, O_RDONLY);
    CHECK(fd >= 0, "reopen %s", shared);
    CHECK(fstat(fd, &st) == 0 && st.st_size == (off_t)BLOCK * BLOCKS_PER_RANK * size,
          "size of %s: %lld", shared, (long long)st.st_size);
    for (int b = 0; b < BLOCKS_PER_RANK * size; b++) {
        fill(buf, BLOCK, b);
        CHECK(pread(fd, back, BLOCK, (off_t)b * BLOCK) == BLOCK, "pread block %d", b);
        CHECK(memcmp(buf, back, BLOCK) == 0, "data of shared block %d", b);
    }
    close(fd);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_io: %d ranks wrote and read back their files and %d blocks of a shared file\n",
               size, BLOCKS_PER_RANK * size);
    free(buf);
    free(back);
    MPI_Finalize();
    return 0;
}
