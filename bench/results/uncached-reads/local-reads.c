// Sixteen threads each read one local file from start to end in pieces of
// RS MiB (default 1), through the page cache (mode "cached") or with
// RWF_DONTCACHE (mode "uncached"); prints wall and system seconds.
//   local-reads cached|uncached FILE...
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef RWF_DONTCACHE
#define RWF_DONTCACHE 0x80
#endif

static char **files;
static int flags;
static size_t piece;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void *reader(void *arg) {
  int fd = open(files[(long)arg], O_RDONLY);
  if (fd < 0) { perror("open"); exit(1); }
  char *buf = malloc(piece);
  memset(buf, 1, piece);
  for (off_t off = 0;; off += piece) {
    struct iovec iov = {buf, piece};
    ssize_t n = preadv2(fd, &iov, 1, off, flags);
    if (n < 0) { perror("preadv2"); exit(1); }
    if (n == 0) break;
  }
  free(buf);
  close(fd);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: %s cached|uncached FILE...\n", argv[0]); return 2; }
  flags = strcmp(argv[1], "uncached") == 0 ? RWF_DONTCACHE : 0;
  piece = (size_t)atoi(getenv("RS") ? getenv("RS") : "1") << 20;
  files = argv + 2;
  int n = argc - 2;
  pthread_t t[n];
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  double t0 = now();
  for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, reader, (void *)i);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  double wall = now() - t0;
  getrusage(RUSAGE_SELF, &r1);
  double sys = (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) + (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
  printf("%.2f,%.2f\n", wall, sys);
  return 0;
}
