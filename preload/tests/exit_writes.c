/* Writes to Shoal files while the process exits, after glibc has dropped
 * the main thread's thread-locals (exit(3) runs their destructors before
 * the atexit handlers and stdio's last flush): a stream left open with
 * bytes in its buffer, and an atexit handler registered before the first
 * Shoal call that writes to a descriptor. Both must land, with no panic.
 * Usage: exit_writes FILE (also writes FILE.late) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int late_fd = -1;

static void write_late(void) {
    const char *m = "from an atexit handler\n";
    if (write(late_fd, m, strlen(m)) != (ssize_t)strlen(m))
        perror("exit_writes: write at exit");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: exit_writes FILE\n");
        return 2;
    }
    /* Registered before the library connects, so it runs after the
     * library's own exit handler. */
    atexit(write_late);
    char late[4096];
    snprintf(late, sizeof late, "%s.late", argv[1]);
    late_fd = open(late, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FILE *f = fopen(argv[1], "w");
    if (late_fd < 0 || f == NULL) {
        perror("exit_writes: open");
        return 1;
    }
    fprintf(f, "left in a stream's buffer\n");
    return 0; /* no fclose, no close */
}
