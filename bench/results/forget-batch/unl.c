#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>
// unl DIR N MODE: MODE c = create N files (open+close), u = unlink them
int main(int argc, char **argv) {
  int n = atoi(argv[2]); char p[4096];
  if (argv[3][0] == 'c') mkdir(argv[1], 0755);
  for (int i = 0; i < n; i++) {
    snprintf(p, sizeof p, "%s/f%d", argv[1], i);
    if (argv[3][0] == 'c') { int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0644); if (fd < 0) { perror(p); return 1; } close(fd); }
    else if (unlink(p)) { perror(p); return 1; }
  }
  return 0;
}
