// What a first touch of memory costs on this VM: maps MIB MiB of anonymous
// memory (small pages), writes one byte per page, unmaps; first memory long
// free, then memory freed an instant before, then again after SECONDS.
//   touch-memory MIB SECONDS   (prints MiB/s and µs per page of each pass)
//   touch-memory MIB           (one pass, silent: leaves MIB MiB just freed)
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void pass(const char *what, size_t size) {
  char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) { perror("mmap"); exit(1); }
  madvise(p, size, MADV_NOHUGEPAGE);
  double t0 = now();
  for (size_t i = 0; i < size; i += 4096) p[i] = 1;
  double s = now() - t0;
  if (what) printf("%-26s %6.0f MiB/s %5.2f us/page\n", what, size / 1048576.0 / s, s / (size / 4096) * 1e6);
  munmap(p, size);
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: %s MIB [SECONDS]\n", argv[0]); return 2; }
  size_t size = (size_t)atol(argv[1]) << 20;
  if (argc == 2) { pass(NULL, size); return 0; }
  pass("first (memory long free)", size);
  pass("again at once", size);
  sleep(atoi(argv[2]));
  pass("after the pause", size);
  pass("again at once", size);
  return 0;
}
