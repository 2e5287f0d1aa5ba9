/* An MPI job on several client hosts sharing one file through each host's
 * own mount: every rank adds to a counter at the file's start under an
 * fcntl write lock (F_SETLKW) many times, writes a block of its own, and,
 * after a barrier, checks every rank's block and the counter's total. A
 * rank finds its host's mount by its address (10.77.0.100 + j: client
 * host cj, `scripts/hosts`): argv[1 + j].
 * Usage: shared_file MOUNT-OF-C0/FILE MOUNT-OF-C1/FILE ... */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 65536
#define ADDS 50

static int rank;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "rank %d: ", rank);                           \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno)); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                 \
        }                                                                 \
    } while (0)

/* This host's client number: the last byte of its 10.77.0.x address - 100. */
static int client_host(void)
{
    struct ifaddrs *all, *a;
    int j = -1;
    if (getifaddrs(&all) != 0)
        return -1;
    for (a = all; a; a = a->ifa_next) {
        if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET)
            continue;
        uint32_t ip = ntohl(((struct sockaddr_in *)a->ifa_addr)->sin_addr.s_addr);
        if ((ip >> 8) == ((10u << 16) | (77u << 8)) && (ip & 0xff) >= 100)
            j = (int)(ip & 0xff) - 100;
    }
    freeifaddrs(all);
    return j;
}

static int lock(int fd, short type)
{
    struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 8};
    return fcntl(fd, type == F_UNLCK ? F_SETLK : F_SETLKW, &l);
}

static void fill(unsigned char *buf, int r)
{
    for (int i = 0; i < BLOCK; i++)
        buf[i] = (unsigned char)(r * 31 + i * 7 + (i >> 10));
}

int main(int argc, char **argv)
{
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int host = client_host();
    CHECK(host >= 0 && host + 1 < argc, "no mount for this host (client host %d)", host);
    const char *path = argv[1 + host];
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0, "open %s", path);

    for (int i = 0; i < ADDS; i++) {
        uint64_t n;
        CHECK(lock(fd, F_WRLCK) == 0, "F_SETLKW");
        CHECK(pread(fd, &n, 8, 0) == 8, "read the counter");
        n++;
        CHECK(pwrite(fd, &n, 8, 0) == 8, "write the counter");
        CHECK(lock(fd, F_UNLCK) == 0, "unlock");
    }
    unsigned char *buf = malloc(BLOCK), *back = malloc(BLOCK);
    fill(buf, rank);
    CHECK(pwrite(fd, buf, BLOCK, (off_t)(rank + 1) * BLOCK) == BLOCK, "write my block");
    CHECK(fsync(fd) == 0, "fsync");
    MPI_Barrier(MPI_COMM_WORLD);

    /* A read lock orders this rank's reads after the others' writes. */
    struct flock rl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    CHECK(fcntl(fd, F_SETLKW, &rl) == 0, "read lock");
    for (int r = 0; r < size; r++) {
        fill(buf, r);
        CHECK(pread(fd, back, BLOCK, (off_t)(r + 1) * BLOCK) == BLOCK, "read block %d", r);
        CHECK(memcmp(buf, back, BLOCK) == 0, "block %d differs", r);
    }
    uint64_t n;
    CHECK(pread(fd, &n, 8, 0) == 8, "read the counter");
    CHECK(n == (uint64_t)size * ADDS, "counter %llu, not %d", (unsigned long long)n, size * ADDS);
    close(fd);
    printf("rank %d on client host c%d: ok\n", rank, host);
    MPI_Finalize();
    return 0;
}
