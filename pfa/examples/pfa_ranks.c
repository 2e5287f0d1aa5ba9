/* A program that used to write one file per rank per step, changed to the
 * PFA calls [Kato 2011]: NRANKS processes each store STEPS records of
 * 272,383 bytes (and an incrementally logged checkpoint) into ONE container,
 * then read everything back and check it.
 *
 *   cc -I pfa/include pfa/examples/pfa_ranks.c target/debug/libshoal_pfa.a \
 *      -lpthread -ldl -lm -o pfa_ranks && ./pfa_ranks /tmp/out.pfa
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pfa.h"

#define NRANKS 4
#define STEPS 5
#define RECORD 272383
#define CKPT 737534

static unsigned char expect(int rank, long step, size_t i) {
    return (unsigned char)(i * 31 + step * 7 + rank * 13);
}

static int writer(const char *path, int rank) {
    pfa_container_t *c = pfa_create(path, NRANKS, 0);
    if (!c) { perror("pfa_create"); return 1; }
    /* was: fopen("record.<rank>.<step>") per step */
    char *rec = pfa_mmap(c, "record.dat", RECORD, rank, PFA_WRONLY);
    char *ckpt = pfa_mmap(c, "ckpt.img", CKPT, rank, PFA_WRONLY | PFA_INCREMENTAL);
    if (!rec || !ckpt) { perror("pfa_mmap"); return 1; }
    for (long step = 0; step < STEPS; step++) {
        for (size_t i = 0; i < RECORD; i++) rec[i] = expect(rank, step, i);
        /* the checkpoint changes one page in three */
        for (size_t p = step % 3; p * 4096 < CKPT; p += 3) ckpt[p * 4096] = (char)(step + rank);
        if (pfa_append(rec, RECORD) != step || pfa_append(ckpt, CKPT) != step) {
            perror("pfa_append");
            return 1;
        }
    }
    pfa_munmap(rec);
    pfa_munmap(ckpt);
    if (pfa_sync(c) || pfa_close(c)) { perror("pfa_sync"); return 1; }
    return 0;
}

static int reader(const char *path, int rank) {
    pfa_container_t *c = pfa_open(path);
    if (!c) { perror("pfa_open"); return 1; }
    const char *buf = pfa_mmap(c, "record.dat", RECORD, rank, PFA_RDONLY);
    if (!buf) { perror("pfa_mmap"); return 1; }
    long step = 0;
    while (!pfa_eof((void *)buf)) {
        if (pfa_length((void *)buf) != RECORD) { fprintf(stderr, "length\n"); return 1; }
        for (size_t i = 0; i < RECORD; i++)
            if ((unsigned char)buf[i] != expect(rank, step, i)) {
                fprintf(stderr, "rank %d step %ld byte %zu differs\n", rank, step, i);
                return 1;
            }
        step++;
        pfa_seek((void *)buf, 1, SEEK_CUR);
    }
    if (step != STEPS) { fprintf(stderr, "rank %d: %ld steps\n", rank, step); return 1; }
    /* the last checkpoint, rebuilt from its base and increments */
    const char *ck = pfa_mmap(c, "ckpt.img", CKPT, rank, PFA_RDONLY);
    pfa_seek((void *)ck, -1, SEEK_END);
    for (size_t p = 0; p * 4096 < CKPT; p++) {
        long last = -1;
        for (long s = 0; s < STEPS; s++) if ((long)p % 3 == s % 3) last = s;
        char want = last < 0 ? 0 : (char)(last + rank);
        if (ck[p * 4096] != want) { fprintf(stderr, "ckpt page %zu\n", p); return 1; }
    }
    pfa_munmap((void *)buf);
    pfa_munmap((void *)ck);
    pfa_close(c);
    return 0;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "out.pfa";
    pid_t kids[NRANKS];
    for (int r = 0; r < NRANKS; r++)
        if ((kids[r] = fork()) == 0) _exit(writer(path, r));
    int bad = 0, st;
    for (int r = 0; r < NRANKS; r++) {
        waitpid(kids[r], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st);
    }
    for (int r = 0; r < NRANKS && !bad; r++) bad |= reader(path, r);
    if (pfa_open("/nonexistent/x.pfa") != NULL || errno != ENOENT) bad = 1;
    printf("%s: %d ranks x %d steps in one container: %s\n", path, NRANKS, STEPS,
           bad ? "FAILED" : "ok");
    return bad;
}
