#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>
#include <time.h>
// creat DIR N: creates N files in DIR (kept open up to 900, then closed)
int main(int argc, char **argv) {
  int n = atoi(argv[2]); char p[4096]; int fds[1000]; int k = 0;
  mkdir(argv[1], 0755);
  struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < n; i++) {
    snprintf(p, sizeof p, "%s/f%d", argv[1], i);
    int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) { perror(p); return 1; }
    fds[k++] = fd;
    if (k == 900) { for (int j = 0; j < k; j++) close(fds[j]); k = 0; }
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  for (int j = 0; j < k; j++) close(fds[j]);
  double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
  printf("%.0f creates/s\n", n / s);
  return 0;
}
