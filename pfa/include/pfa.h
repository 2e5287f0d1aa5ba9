/* Parallel file aggregation [Kato 2011]: many ranks' small logical files in
 * one shared container file, through a memory-mapped append API.
 * Link with -lshoal_pfa (target/<profile>/libshoal_pfa.{a,so}).
 * Errors return -1 (NULL for pointers) and set errno. */
#ifndef SHOAL_PFA_H
#define SHOAL_PFA_H

#include <stddef.h>
#include <stdio.h> /* SEEK_SET, SEEK_CUR, SEEK_END for pfa_seek */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PfaContainer pfa_container_t;

#define PFA_RDONLY 0
#define PFA_WRONLY 1
#define PFA_INCREMENTAL 2 /* with PFA_WRONLY: store only changed pages */

/* Opens the container, creating it for nranks ranks (chunk_size 0: default)
 * if it does not exist; every rank of a job may call it. */
pfa_container_t *pfa_create(const char *path, int nranks, size_t chunk_size);
pfa_container_t *pfa_open(const char *path);
int pfa_sync(pfa_container_t *c);
int pfa_close(pfa_container_t *c);

/* A zeroed buffer of size bytes for logical file name of rank. Read mode:
 * it holds step 0; pfa_seek moves, pfa_eof says when past the last step. */
void *pfa_mmap(pfa_container_t *c, const char *name, size_t size, int rank, int flags);
/* Stores the first len bytes as the next step; returns the step. */
long pfa_append(void *buf, size_t len);
/* Steps counted as lseek counts bytes; returns the step now in the buffer. */
long pfa_seek(void *buf, long offset, int whence);
int pfa_eof(void *buf);
/* Logical length of the step in a read buffer. */
long pfa_length(void *buf);
/* Incremental mode: declare a range written before read(2) fills it. */
int pfa_touch(void *buf, size_t offset, size_t len);
int pfa_munmap(void *buf);

#ifdef __cplusplus
}
#endif
#endif
