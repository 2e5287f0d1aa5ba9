/*
 * The C test suite of libshoal (cmocka), run by capi/tests/run against a
 * real cluster: test_capi CLUSTER.toml
 *
 * Each test works in its own directory under /capi-<pid>.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cmocka.h>

#include <shoal.h>

static const char *cluster_file;
/* The directory the tests make theirs in ("" for the root). */
static const char *top = "";
static char base[64];

/* A call that must succeed: on failure, says which and why. */
#define OK(call)                                                                         \
    do {                                                                                 \
        long r_ = (long)(call);                                                          \
        if (r_ < 0)                                                                      \
            fail_msg("%s failed: %s (%s)", #call, strerror(errno), shoal_last_error());  \
    } while (0)

/* A call that must fail with errno `e`. */
#define FAILS(call, e)                                                                   \
    do {                                                                                 \
        errno = 0;                                                                       \
        long r_ = (long)(call);                                                          \
        if (r_ != -1 || errno != (e))                                                    \
            fail_msg("%s returned %ld errno %d (%s), wanted -1 errno %d (%s)", #call, r_, \
                     errno, strerror(errno), (e), strerror(e));                          \
    } while (0)

/* "base/test/name" (or "base/test"), allocated for the whole run. */
static const char *at(const char *test, const char *name)
{
    char buf[512];
    if (name)
        snprintf(buf, sizeof buf, "%s/%s/%s", base, test, name);
    else
        snprintf(buf, sizeof buf, "%s/%s", base, test);
    char *p = strdup(buf);
    if (!p)
        abort();
    return p;
}

static void fill(unsigned char *buf, size_t len, uint64_t from, unsigned seed)
{
    for (size_t i = 0; i < len; i++) {
        uint64_t x = from + i;
        buf[i] = (unsigned char)((x * 2654435761u) >> 13) ^ (unsigned char)(x >> 20) ^ seed;
    }
}

static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = shoal_write(fd, p, len);
        if (n <= 0)
            fail_msg("write: %s (%s)", strerror(errno), shoal_last_error());
        p += n;
        len -= (size_t)n;
    }
}

static void put_file(const char *path, const char *text)
{
    int fd = shoal_open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0)
        fail_msg("create %s: %s (%s)", path, strerror(errno), shoal_last_error());
    write_all(fd, text, strlen(text));
    OK(shoal_close(fd));
}

static void assert_content(const char *path, const char *text)
{
    char buf[256] = {0};
    int fd = shoal_open(path, O_RDONLY, 0);
    if (fd < 0)
        fail_msg("open %s: %s (%s)", path, strerror(errno), shoal_last_error());
    ssize_t n = shoal_read(fd, buf, sizeof buf - 1);
    assert_int_equal(n, strlen(text));
    assert_string_equal(buf, text);
    OK(shoal_close(fd));
}

static uint64_t strip_size(void)
{
    /* The cluster's strip size is st_blksize. */
    struct stat st;
    OK(shoal_stat("/", &st));
    return (uint64_t)st.st_blksize;
}

/* ---- before connecting ---- */

static void test_calls_before_connect_fail_with_enotconn(void **state)
{
    (void)state;
    struct stat st;
    assert_int_equal(shoal_is_connected(), 0);
    FAILS(shoal_stat("/", &st), ENOTCONN);
    assert_non_null(strstr(shoal_last_error(), "shoal_connect"));
    FAILS(shoal_disconnect(), ENOTCONN);
    FAILS(shoal_connect(NULL), EFAULT);
    FAILS(shoal_connect("/nonexistent/cluster.toml"), ENOENT);
    assert_non_null(strstr(shoal_last_error(), "/nonexistent/cluster.toml"));
}

/* ---- connected ---- */

static int connect_all(void **state)
{
    (void)state;
    if (shoal_connect(cluster_file) < 0) {
        fprintf(stderr, "connect %s: %s (%s)\n", cluster_file, strerror(errno),
                shoal_last_error());
        return -1;
    }
    snprintf(base, sizeof base, "%s/capi-%d", top, (int)getpid());
    return shoal_mkdir(base, 0755);
}

static int disconnect_all(void **state)
{
    (void)state;
    return shoal_disconnect();
}

static void test_connect_counts_users_and_refuses_another_cluster(void **state)
{
    (void)state;
    OK(shoal_connect(cluster_file));
    OK(shoal_disconnect());
    assert_int_equal(shoal_is_connected(), 1);
    FAILS(shoal_connect("/etc/hostname"), EISCONN);
    struct stat st;
    OK(shoal_stat("/", &st));
    assert_true(S_ISDIR(st.st_mode));
}

static void test_data_round_trips_across_strip_boundaries(void **state)
{
    (void)state;
    const uint64_t strip = strip_size();
    assert_true(strip >= 4096);
    const size_t total = 3 * strip + 4099;
    unsigned char *data = malloc(total), *back = malloc(total);
    assert_non_null(data);
    assert_non_null(back);
    fill(data, total, 0, 1);

    OK(shoal_mkdir(at("strips", NULL), 0755));
    const char *path = at("strips", "big");
    int fd = shoal_open(path, O_CREAT | O_EXCL | O_RDWR, 0644);
    OK(fd);
    /* Writes of an odd size, so that many cross a strip boundary. */
    for (size_t off = 0; off < total; off += 100003) {
        size_t n = total - off < 100003 ? total - off : 100003;
        write_all(fd, data + off, n);
    }
    assert_int_equal(shoal_lseek(fd, 0, SEEK_CUR), total);
    struct stat st;
    OK(shoal_fstat(fd, &st));
    assert_int_equal(st.st_size, total);
    struct shoal_layout layout;
    OK(shoal_get_layout(path, &layout));
    assert_int_equal(layout.strip_size, strip);
    assert_true(layout.num_datafiles >= 2); /* striped over several servers */

    /* Sequential reads of another odd size. */
    assert_int_equal(shoal_lseek(fd, 0, SEEK_SET), 0);
    size_t got = 0;
    while (got < total) {
        ssize_t n = shoal_read(fd, back + got, 65539);
        assert_true(n > 0);
        got += (size_t)n;
    }
    assert_int_equal(shoal_read(fd, back, 10), 0); /* end of file */
    assert_memory_equal(back, data, total);

    /* Around every boundary, and a short read at the end. */
    for (uint64_t k = 1; k <= 3; k++) {
        memset(back, 0, 200);
        assert_int_equal(shoal_pread(fd, back, 200, (off_t)(k * strip - 100)), 200);
        assert_memory_equal(back, data + k * strip - 100, 200);
    }
    assert_int_equal(shoal_pread(fd, back, 100, (off_t)total - 10), 10);
    assert_memory_equal(back, data + total - 10, 10);
    assert_int_equal(shoal_pread(fd, back, 100, (off_t)total + 5), 0);
    OK(shoal_fsync(fd));
    OK(shoal_close(fd));

    /* One read over every strip, by a new descriptor. */
    fd = shoal_open(path, O_RDONLY, 0);
    OK(fd);
    memset(back, 0, total);
    assert_int_equal(shoal_pread(fd, back, total, 0), total);
    assert_memory_equal(back, data, total);
    /* Overwrite across a boundary and read it back. */
    OK(shoal_close(fd));
    fd = shoal_open(path, O_RDWR, 0);
    fill(data + strip - 7, 14, 99, 2);
    assert_int_equal(shoal_pwrite(fd, data + strip - 7, 14, (off_t)strip - 7), 14);
    assert_int_equal(shoal_pread(fd, back, total, 0), total);
    assert_memory_equal(back, data, total);
    OK(shoal_close(fd));
    free(data);
    free(back);
}

static void test_errors_are_posix_errnos(void **state)
{
    (void)state;
    char buf[16];
    struct stat st;
    OK(shoal_mkdir(at("err", NULL), 0755));
    OK(shoal_mkdir(at("err", "dir"), 0755));
    put_file(at("err", "dir/inside"), "x");
    put_file(at("err", "file"), "data");

    FAILS(shoal_open(at("err", "missing"), O_RDONLY, 0), ENOENT);
    assert_non_null(strstr(shoal_last_error(), "missing"));
    FAILS(shoal_stat(at("err", "missing/deeper"), &st), ENOENT);
    FAILS(shoal_unlink(at("err", "missing")), ENOENT);

    FAILS(shoal_mkdir(at("err", "dir"), 0755), EEXIST);
    FAILS(shoal_open(at("err", "file"), O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST);
    FAILS(shoal_symlink("x", at("err", "file")), EEXIST);

    FAILS(shoal_open(at("err", "file/x"), O_RDONLY, 0), ENOTDIR);
    FAILS(shoal_mkdir(at("err", "file/sub"), 0755), ENOTDIR);
    FAILS(shoal_stat(at("err", "file/"), &st), ENOTDIR);
    FAILS(shoal_opendir(at("err", "file")), ENOTDIR);
    FAILS(shoal_rmdir(at("err", "file")), ENOTDIR);
    FAILS(shoal_rename(at("err", "dir"), at("err", "file")), ENOTDIR);

    FAILS(shoal_open(at("err", "dir"), O_WRONLY, 0), EISDIR);
    FAILS(shoal_open(at("err", "dir"), O_RDWR, 0), EISDIR);
    FAILS(shoal_unlink(at("err", "dir")), EISDIR);
    FAILS(shoal_rename(at("err", "file"), at("err", "dir")), EISDIR);
    int dfd = shoal_open(at("err", "dir"), O_RDONLY, 0);
    OK(dfd);
    FAILS(shoal_read(dfd, buf, sizeof buf), EISDIR);
    OK(shoal_close(dfd));

    FAILS(shoal_rmdir(at("err", "dir")), ENOTEMPTY);

    FAILS(shoal_close(-1), EBADF);
    FAILS(shoal_close(12345), EBADF);
    FAILS(shoal_read(-1, buf, sizeof buf), EBADF);
    FAILS(shoal_write(777, "x", 1), EBADF);
    FAILS(shoal_fstat(999, &st), EBADF);
    FAILS(shoal_lseek(999, 0, SEEK_SET), EBADF);
    FAILS(shoal_fsync(999), EBADF);
    int fd = shoal_open(at("err", "file"), O_RDONLY, 0);
    OK(fd);
    FAILS(shoal_write(fd, "x", 1), EBADF);
    FAILS(shoal_ftruncate(fd, 0), EINVAL);
    FAILS(shoal_readdir(fd, &(struct shoal_dirent){0}), ENOTDIR);
    OK(shoal_close(fd));
    FAILS(shoal_close(fd), EBADF);
    FAILS(shoal_read(fd, buf, sizeof buf), EBADF);
    fd = shoal_open(at("err", "file"), O_WRONLY, 0);
    OK(fd);
    FAILS(shoal_read(fd, buf, sizeof buf), EBADF);
    FAILS(shoal_write(fd, NULL, 4), EFAULT);
    FAILS(shoal_lseek(fd, -1, SEEK_SET), EINVAL);
    FAILS(shoal_lseek(fd, 0, 12345), EINVAL);
    FAILS(shoal_pwrite(fd, "x", 1, -5), EINVAL);
    OK(shoal_close(fd));

    FAILS(shoal_stat(NULL, &st), EFAULT);
    FAILS(shoal_stat(at("err", "file"), NULL), EFAULT);
    FAILS(shoal_open(NULL, O_RDONLY, 0), EFAULT);
    FAILS(shoal_open("relative/path", O_RDONLY, 0), EINVAL);
    FAILS(shoal_open("", O_RDONLY, 0), ENOENT);
    FAILS(shoal_readlink(at("err", "file"), buf, sizeof buf), EINVAL);
    FAILS(shoal_rmdir("/"), EBUSY);

    /* Nothing above changed the file. */
    assert_content(at("err", "file"), "data");
}

static void test_readdirplus_attributes_match_stat(void **state)
{
    (void)state;
    const uint64_t strip = strip_size();
    const char *dir = at("plus", NULL);
    OK(shoal_mkdir(dir, 0755));
    const size_t sizes[] = {0, 1, 4096, 0};
    const char *names[] = {"empty", "one", "page", "striped"};
    for (int i = 0; i < 4; i++) {
        int fd = shoal_open(at("plus", names[i]), O_CREAT | O_WRONLY, 0640);
        OK(fd);
        size_t n = i == 3 ? strip + 1 : sizes[i];
        if (n) {
            unsigned char *b = calloc(1, n);
            write_all(fd, b, n);
            free(b);
        }
        OK(shoal_close(fd));
    }
    OK(shoal_chmod(at("plus", "one"), 0600));
    struct timespec when[2] = {{1000000000, 5}, {1200000000, 123456789}};
    OK(shoal_utimens(at("plus", "page"), when, 0));
    OK(shoal_mkdir(at("plus", "sub"), 0700));
    OK(shoal_symlink("one", at("plus", "link")));

    int d = shoal_opendir(dir);
    OK(d);
    struct shoal_dirent ent;
    struct stat st, want;
    int seen = 0, dots = 0, r;
    while ((r = shoal_readdirplus(d, &ent, &st)) == 1) {
        if (!strcmp(ent.d_name, ".") || !strcmp(ent.d_name, "..")) {
            assert_true(S_ISDIR(st.st_mode));
            assert_int_equal(ent.d_type, DT_DIR);
            if (!strcmp(ent.d_name, ".")) {
                OK(shoal_stat(dir, &want));
                assert_int_equal(st.st_ino, want.st_ino);
            }
            dots++;
            continue;
        }
        seen++;
        OK(shoal_lstat(at("plus", ent.d_name), &want));
        assert_int_equal(ent.d_ino, want.st_ino);
        assert_int_equal(st.st_ino, want.st_ino);
        assert_int_equal(st.st_mode, want.st_mode);
        assert_int_equal(st.st_size, want.st_size);
        assert_int_equal(st.st_uid, want.st_uid);
        assert_int_equal(st.st_gid, want.st_gid);
        assert_int_equal(st.st_nlink, want.st_nlink);
        assert_int_equal(st.st_mtim.tv_sec, want.st_mtim.tv_sec);
        assert_int_equal(st.st_mtim.tv_nsec, want.st_mtim.tv_nsec);
        assert_int_equal(ent.d_type, S_ISDIR(want.st_mode)   ? DT_DIR
                                     : S_ISLNK(want.st_mode) ? DT_LNK
                                                             : DT_REG);
        if (!strcmp(ent.d_name, "striped"))
            assert_int_equal(st.st_size, strip + 1);
        if (!strcmp(ent.d_name, "one"))
            assert_int_equal(st.st_mode, S_IFREG | 0600);
        if (!strcmp(ent.d_name, "page")) {
            assert_int_equal(st.st_mtim.tv_sec, 1200000000);
            assert_int_equal(st.st_mtim.tv_nsec, 123456789);
            assert_int_equal(st.st_atim.tv_sec, 1000000000);
        }
        if (!strcmp(ent.d_name, "link")) {
            assert_true(S_ISLNK(st.st_mode));
            assert_int_equal(st.st_size, 3);
        }
    }
    assert_int_equal(r, 0);
    assert_int_equal(dots, 2);
    assert_int_equal(seen, 6);
    /* Past the end stays at the end; a rewind starts over. */
    assert_int_equal(shoal_readdirplus(d, &ent, &st), 0);
    OK(shoal_rewinddir(d));
    int again = 0;
    while ((r = shoal_readdir(d, &ent)) == 1)
        again++;
    assert_int_equal(r, 0);
    assert_int_equal(again, 8);
    OK(shoal_closedir(d));
}

static void test_a_listing_spans_several_batches(void **state)
{
    (void)state;
    enum { N = 530 }; /* more than one readdir batch (512 by default) */
    OK(shoal_mkdir(at("many", NULL), 0755));
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "f%04d", i);
        int fd = shoal_open(at("many", name), O_CREAT | O_WRONLY, 0644);
        OK(fd);
        if (i % 2)
            assert_int_equal(shoal_write(fd, name, 5), 5);
        OK(shoal_close(fd));
    }
    static char seen[N];
    memset(seen, 0, sizeof seen);
    int d = shoal_opendir(at("many", NULL));
    OK(d);
    struct shoal_dirent ent;
    struct stat st;
    int count = 0, r;
    while ((r = shoal_readdirplus(d, &ent, &st)) == 1) {
        if (ent.d_name[0] == '.')
            continue;
        int i = atoi(ent.d_name + 1);
        assert_in_range(i, 0, N - 1);
        assert_int_equal(seen[i], 0);
        seen[i] = 1;
        assert_int_equal(st.st_size, i % 2 ? 5 : 0);
        count++;
    }
    assert_int_equal(r, 0);
    assert_int_equal(count, N);
    OK(shoal_closedir(d));

    /* The same listing a batch per call, with and without attributes. */
    for (int plus = 0; plus < 2; plus++) {
        static struct shoal_dirent ents[100];
        static struct stat sts[100];
        memset(seen, 0, sizeof seen);
        d = shoal_opendir(at("many", NULL));
        OK(d);
        int calls = 0;
        long got;
        count = 0;
        while ((got = shoal_readdir_many(d, ents, plus ? sts : NULL, 100)) > 0) {
            assert_in_range(got, 1, 100);
            calls++;
            for (long k = 0; k < got; k++) {
                if (ents[k].d_name[0] == '.')
                    continue;
                int i = atoi(ents[k].d_name + 1);
                assert_int_equal(seen[i], 0);
                seen[i] = 1;
                assert_int_equal(ents[k].d_type, DT_REG);
                if (plus) {
                    assert_int_equal(sts[k].st_size, i % 2 ? 5 : 0);
                    assert_int_equal(sts[k].st_ino, ents[k].d_ino);
                }
                count++;
            }
        }
        assert_int_equal(got, 0);
        assert_int_equal(count, N);
        assert_int_equal(calls, (N + 2 + 99) / 100); /* full batches until the end */
        OK(shoal_closedir(d));
    }
    assert_int_equal(shoal_readdir_many(-1, NULL, NULL, 1), -1);
    assert_int_equal(errno, EFAULT);

    /* With the attributes this process holds: those the listings above
     * just brought, so all of them, for no message. */
    {
        static struct shoal_dirent ents[100];
        static struct stat sts[100];
        d = shoal_opendir(at("many", NULL));
        OK(d);
        long got;
        count = 0;
        while ((got = shoal_readdir_held(d, ents, sts, 100)) > 0) {
            for (long k = 0; k < got; k++) {
                if (ents[k].d_name[0] == '.')
                    continue;
                int i = atoi(ents[k].d_name + 1);
                assert_int_equal(sts[k].st_ino, ents[k].d_ino);
                assert_int_equal(sts[k].st_size, i % 2 ? 5 : 0);
                count++;
            }
        }
        assert_int_equal(got, 0);
        assert_int_equal(count, N);
        assert_int_equal(shoal_readdir_held(d, ents, NULL, 100), -1);
        assert_int_equal(errno, EFAULT);
        OK(shoal_closedir(d));
    }

    /* Attributes by handle, as a listing names them. */
    uint64_t handles[3];
    struct stat by_path[2], by_handle[3];
    OK(shoal_stat(at("many", "f0001"), &by_path[0]));
    OK(shoal_stat(at("many", "f0002"), &by_path[1]));
    handles[0] = by_path[0].st_ino;
    handles[1] = by_path[1].st_ino;
    OK(shoal_stat(at("many", "f0003"), &by_handle[2]));
    handles[2] = by_handle[2].st_ino;
    OK(shoal_unlink(at("many", "f0003")));
    OK(shoal_stat_handles(handles, 3, by_handle));
    for (int k = 0; k < 2; k++) {
        assert_int_equal(by_handle[k].st_ino, by_path[k].st_ino);
        assert_int_equal(by_handle[k].st_size, by_path[k].st_size);
        assert_int_equal(by_handle[k].st_mode, by_path[k].st_mode);
    }
    assert_int_equal(by_handle[2].st_ino, 0); /* gone */
    assert_int_equal(shoal_stat_handles(NULL, 1, by_handle), -1);
    assert_int_equal(errno, EFAULT);
    assert_int_equal(shoal_stat_handles(handles, 5000, by_handle), -1);
    assert_int_equal(errno, EINVAL);
    OK(shoal_stat_handles(NULL, 0, NULL));
}

struct writer {
    int fd;
    uint64_t from, len;
    unsigned seed;
    int failed;
};

static void *write_range(void *arg)
{
    struct writer *w = arg;
    unsigned char buf[50021];
    for (uint64_t off = 0; off < w->len; off += sizeof buf) {
        size_t n = w->len - off < sizeof buf ? (size_t)(w->len - off) : sizeof buf;
        fill(buf, n, w->from + off, w->seed);
        if (shoal_pwrite(w->fd, buf, n, (off_t)(w->from + off)) != (ssize_t)n)
            w->failed = errno ? errno : -1;
    }
    return NULL;
}

enum { RECORD = 1000, RECORDS = 300 };

static void *append_records(void *arg)
{
    struct writer *w = arg;
    unsigned char rec[RECORD];
    for (int i = 0; i < RECORDS; i++) {
        memset(rec, (int)w->seed, sizeof rec);
        if (shoal_write(w->fd, rec, sizeof rec) != RECORD)
            w->failed = errno ? errno : -1;
    }
    return NULL;
}

static void test_two_threads_write_disjoint_ranges_of_one_file(void **state)
{
    (void)state;
    const uint64_t strip = strip_size();
    OK(shoal_mkdir(at("threads", NULL), 0755));
    int fd = shoal_open(at("threads", "shared"), O_CREAT | O_RDWR, 0644);
    OK(fd);
    /* Two halves that each span a strip boundary, meeting mid-strip. */
    const uint64_t half = strip + strip / 2 + 777;
    struct writer w[2] = {{fd, 0, half, 3, 0}, {fd, half, half, 3, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, write_range, &w[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failed, 0);
    }
    unsigned char *want = malloc(2 * half), *got = malloc(2 * half);
    fill(want, 2 * half, 0, 3);
    assert_int_equal(shoal_pread(fd, got, 2 * half, 0), 2 * half);
    assert_memory_equal(got, want, 2 * half);
    OK(shoal_close(fd));
    free(want);
    free(got);

    /* write() on one shared descriptor from two threads: every record
     * lands whole, none overlaps another (the offset moves atomically). */
    fd = shoal_open(at("threads", "records"), O_CREAT | O_RDWR, 0644);
    OK(fd);
    struct writer a[2] = {{fd, 0, 0, 'a', 0}, {fd, 0, 0, 'b', 0}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, append_records, &a[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].failed, 0);
    }
    struct stat st;
    OK(shoal_fstat(fd, &st));
    assert_int_equal(st.st_size, 2 * RECORD * RECORDS);
    unsigned char rec[RECORD];
    int count[2] = {0, 0};
    for (int i = 0; i < 2 * RECORDS; i++) {
        assert_int_equal(shoal_pread(fd, rec, RECORD, (off_t)i * RECORD), RECORD);
        assert_true(rec[0] == 'a' || rec[0] == 'b');
        for (int j = 1; j < RECORD; j++)
            assert_int_equal(rec[j], rec[0]);
        count[rec[0] - 'a']++;
    }
    assert_int_equal(count[0], RECORDS);
    assert_int_equal(count[1], RECORDS);
    OK(shoal_close(fd));
}

static void test_rename_replaces_an_existing_file(void **state)
{
    (void)state;
    OK(shoal_mkdir(at("rename", NULL), 0755));
    OK(shoal_mkdir(at("rename", "other"), 0755));
    put_file(at("rename", "a"), "AAA");
    put_file(at("rename", "b"), "BBBBBBB");
    struct stat before;
    OK(shoal_stat(at("rename", "a"), &before));
    /* A descriptor open on the file about to be replaced keeps reading it. */
    int old = shoal_open(at("rename", "b"), O_RDONLY, 0);
    OK(old);

    OK(shoal_rename(at("rename", "a"), at("rename", "b")));
    struct stat st;
    FAILS(shoal_stat(at("rename", "a"), &st), ENOENT);
    OK(shoal_stat(at("rename", "b"), &st));
    assert_int_equal(st.st_ino, before.st_ino);
    assert_content(at("rename", "b"), "AAA");
    char buf[16] = {0};
    assert_int_equal(shoal_read(old, buf, sizeof buf), 7);
    assert_string_equal(buf, "BBBBBBB");
    OK(shoal_close(old));

    /* Across directories, over an existing file. */
    put_file(at("rename", "other/c"), "old");
    OK(shoal_rename(at("rename", "b"), at("rename", "other/c")));
    assert_content(at("rename", "other/c"), "AAA");
    FAILS(shoal_stat(at("rename", "b"), &st), ENOENT);

    /* A directory over an empty one; not over a non-empty one. */
    OK(shoal_mkdir(at("rename", "d1"), 0755));
    OK(shoal_mkdir(at("rename", "d2"), 0755));
    put_file(at("rename", "d1/x"), "x");
    OK(shoal_rename(at("rename", "d1"), at("rename", "d2")));
    assert_content(at("rename", "d2/x"), "x");
    OK(shoal_mkdir(at("rename", "d3"), 0755));
    errno = 0;
    assert_int_equal(shoal_rename(at("rename", "d3"), at("rename", "d2")), -1);
    assert_true(errno == ENOTEMPTY || errno == EEXIST);
}

static void test_xattrs(void **state)
{
    (void)state;
    OK(shoal_mkdir(at("xattr", NULL), 0755));
    const char *f = at("xattr", "f");
    put_file(f, "x");
    char buf[256];

    OK(shoal_setxattr(f, "user.color", "blue", 4, 0));
    assert_int_equal(shoal_getxattr(f, "user.color", NULL, 0), 4);
    FAILS(shoal_getxattr(f, "user.color", buf, 2), ERANGE);
    memset(buf, 0, sizeof buf);
    assert_int_equal(shoal_getxattr(f, "user.color", buf, sizeof buf), 4);
    assert_memory_equal(buf, "blue", 4);
    FAILS(shoal_setxattr(f, "user.color", "red", 3, XATTR_CREATE), EEXIST);
    FAILS(shoal_setxattr(f, "user.none", "red", 3, XATTR_REPLACE), ENODATA);
    OK(shoal_setxattr(f, "user.color", "green", 5, XATTR_REPLACE));
    OK(shoal_setxattr(f, "user.empty", "", 0, 0));
    assert_int_equal(shoal_getxattr(f, "user.empty", buf, sizeof buf), 0);

    ssize_t len = shoal_listxattr(f, NULL, 0);
    assert_true(len > 0);
    assert_int_equal(shoal_listxattr(f, buf, sizeof buf), len);
    int found = 0;
    for (char *p = buf; p < buf + len; p += strlen(p) + 1)
        found += !strcmp(p, "user.color") + !strcmp(p, "user.empty");
    assert_int_equal(found, 2);
    FAILS(shoal_listxattr(f, buf, 3), ERANGE);

    int fd = shoal_open(f, O_RDONLY, 0);
    OK(fd);
    memset(buf, 0, sizeof buf);
    assert_int_equal(shoal_fgetxattr(fd, "user.color", buf, sizeof buf), 5);
    assert_string_equal(buf, "green");
    OK(shoal_fremovexattr(fd, "user.empty"));
    OK(shoal_close(fd));

    OK(shoal_removexattr(f, "user.color"));
    FAILS(shoal_getxattr(f, "user.color", buf, sizeof buf), ENODATA);
    FAILS(shoal_removexattr(f, "user.color"), ENODATA);
    FAILS(shoal_getxattr(at("xattr", "missing"), "user.color", buf, sizeof buf), ENOENT);
}

static void test_directory_hints(void **state)
{
    (void)state;
    const char *dir = at("hints", NULL);
    OK(shoal_mkdir(dir, 0755));
    char buf[256];
    FAILS(shoal_hint_get(dir, "strip_size", buf, sizeof buf), ENODATA);
    OK(shoal_hint_set(dir, "strip_size", "65536"));
    OK(shoal_hint_set(dir, "num_dfiles", "2"));
    assert_int_equal(shoal_hint_get(dir, "strip_size", NULL, 0), 5);
    assert_int_equal(shoal_hint_get(dir, "strip_size", buf, sizeof buf), 5);
    assert_string_equal(buf, "65536");
    FAILS(shoal_hint_get(dir, "strip_size", buf, 5), ERANGE); /* no room for the NUL */
    assert_true(shoal_hint_list(dir, buf, sizeof buf) > 0);
    assert_non_null(strstr(buf, "strip_size=65536\n"));
    assert_non_null(strstr(buf, "num_dfiles=2\n"));

    FAILS(shoal_hint_get(dir, "no_such_hint", buf, sizeof buf), EINVAL);
    FAILS(shoal_hint_set(dir, "strip_size", "12"), EINVAL);
    assert_true(strlen(shoal_last_error()) > 0);
    put_file(at("hints", "plain"), "x");
    FAILS(shoal_hint_set(at("hints", "plain"), "strip_size", "65536"), ENOTDIR);

    /* A file made under the hints is laid out by them. */
    const char *f = at("hints", "striped");
    int fd = shoal_open(f, O_CREAT | O_RDWR, 0644);
    OK(fd);
    enum { LEN = 200000 };
    static unsigned char data[LEN], back[LEN];
    fill(data, LEN, 0, 7);
    write_all(fd, data, LEN);
    assert_int_equal(shoal_pread(fd, back, LEN, 0), LEN);
    assert_memory_equal(back, data, LEN);
    OK(shoal_close(fd));
    struct shoal_layout layout;
    OK(shoal_get_layout(f, &layout));
    assert_int_equal(layout.strip_size, 65536);
    assert_int_equal(layout.num_datafiles, 2);

    /* A new subdirectory starts with a copy; unset clears. */
    OK(shoal_mkdir(at("hints", "sub"), 0755));
    assert_int_equal(shoal_hint_get(at("hints", "sub"), "strip_size", buf, sizeof buf), 5);
    OK(shoal_hint_unset(dir, "strip_size"));
    FAILS(shoal_hint_get(dir, "strip_size", buf, sizeof buf), ENODATA);
    FAILS(shoal_hint_unset(dir, "strip_size"), ENODATA);
    /* Hints are the directory's user.shoal.* xattrs. */
    assert_int_equal(shoal_getxattr(dir, "user.shoal.num_dfiles", buf, sizeof buf), 1);
}

static int child_io(const char *parent_file, const char *own_file)
{
    /* The parent's descriptor still works, on the child's own connection. */
    char buf[64] = {0};
    int fd = shoal_open(parent_file, O_RDONLY, 0);
    if (fd < 0 || shoal_pread(fd, buf, sizeof buf - 1, 0) != 6 || strcmp(buf, "parent"))
        return 10;
    shoal_close(fd);
    int own = shoal_open(own_file, O_CREAT | O_EXCL | O_RDWR, 0644);
    if (own < 0)
        return 11;
    static unsigned char data[300000], back[300000];
    fill(data, sizeof data, 0, 9);
    for (int round = 0; round < 20; round++) {
        if (shoal_pwrite(own, data, sizeof data, 0) != (ssize_t)sizeof data)
            return 12;
        if (shoal_pread(own, back, sizeof back, 0) != (ssize_t)sizeof back ||
            memcmp(back, data, sizeof data))
            return 13;
    }
    return shoal_close(own) < 0 ? 14 : 0;
}

static void test_a_forked_child_does_io_on_its_own_connection(void **state)
{
    (void)state;
    OK(shoal_mkdir(at("fork", NULL), 0755));
    const char *pf = at("fork", "parent"), *cf = at("fork", "child");
    put_file(pf, "parent");
    int inherited = shoal_open(pf, O_RDONLY, 0);
    OK(inherited);

    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(120); /* a child stuck on its parent's connection dies */
        char buf[8] = {0};
        if (shoal_pread(inherited, buf, 6, 0) != 6 || strcmp(buf, "parent"))
            _exit(20);
        _exit(child_io(pf, cf));
    }
    /* The parent keeps working on its connections meanwhile. */
    char buf[8];
    for (int i = 0; i < 200; i++) {
        memset(buf, 0, sizeof buf);
        assert_int_equal(shoal_pread(inherited, buf, 6, 0), 6);
        assert_string_equal(buf, "parent");
        struct stat st;
        OK(shoal_stat(pf, &st));
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* Another client's new entry shows within the client's cache TTL
     * (100 ms by default) in a directory this process made. */
    struct stat st;
    int tries = 0;
    while (shoal_stat(cf, &st) < 0 && errno == ENOENT && tries++ < 40)
        usleep(50 * 1000);
    OK(shoal_stat(cf, &st));
    assert_int_equal(st.st_size, 300000);
    OK(shoal_close(inherited));
}

/* What another process sees of `path`: forks a child (its own connection,
 * nothing cached) that compares the mode and mtime with the expected ones. */
static void another_process_sees(const char *path, mode_t mode, time_t mtime)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(120);
        struct stat st;
        if (shoal_stat(path, &st) < 0)
            _exit(20);
        if ((st.st_mode & 07777) != mode || st.st_mtim.tv_sec != mtime) {
            fprintf(stderr, "%s: mode %o mtime %ld, expected %o and %ld\n", path,
                    st.st_mode & 07777, (long)st.st_mtim.tv_sec, mode, (long)mtime);
            _exit(21);
        }
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_attribute_changes_of_a_new_file_are_sent_as_one(void **state)
{
    (void)state;
    OK(shoal_mkdir(at("held", NULL), 0755));
    const char *f = at("held", "f");
    int fd = shoal_open(f, O_WRONLY | O_CREAT | O_EXCL, 0600);
    OK(fd);
    assert_int_equal(shoal_write(fd, "x", 1), 1);
    struct stat st;
    OK(shoal_fstat(fd, &st));
    time_t created = st.st_mtim.tv_sec;

    /* What tar does after writing a file: times, owner (unchanged), mode. */
    struct timespec times[2] = {{0, UTIME_OMIT}, {1000000, 0}};
    OK(shoal_futimens(fd, times));
    OK(shoal_fchown(fd, getuid(), getgid()));
    OK(shoal_fchmod(fd, 0644));
    /* Held: another process still sees the file as it was created... */
    another_process_sees(f, 0600, created);
    /* ...this one sees its changes (its next call sends them first)... */
    OK(shoal_fstat(fd, &st));
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_int_equal(st.st_mtim.tv_sec, 1000000);
    /* ...and so does everyone once they are sent. */
    another_process_sees(f, 0644, 1000000);

    /* A change that narrows access is sent at once. */
    OK(shoal_fchmod(fd, 0600));
    another_process_sees(f, 0600, 1000000);

    /* close and shoal_flush send what is held. */
    times[1].tv_sec = 2000000;
    OK(shoal_futimens(fd, times));
    OK(shoal_flush());
    another_process_sees(f, 0600, 2000000);
    times[1].tv_sec = 3000000;
    OK(shoal_futimens(fd, times));
    OK(shoal_close(fd));
    another_process_sees(f, 0600, 3000000);

    /* A file this open did not create: sent at once. */
    fd = shoal_open(f, O_WRONLY, 0);
    OK(fd);
    OK(shoal_fchmod(fd, 0640));
    another_process_sees(f, 0640, 3000000);
    OK(shoal_close(fd));
}

static void test_small_sequential_reads_see_this_process_writes(void **state)
{
    (void)state;
    enum { SIZE = 1 << 20, STEP = 4096 };
    static unsigned char data[SIZE], back[STEP];
    for (int i = 0; i < SIZE; i++)
        data[i] = (unsigned char)(i * 7 + i / 4096);
    OK(shoal_mkdir(at("readahead", NULL), 0755));
    const char *f = at("readahead", "f");
    int w = shoal_open(f, O_CREAT | O_RDWR, 0644);
    OK(w);
    assert_int_equal(shoal_write(w, data, SIZE), SIZE);
    int r = shoal_open(f, O_RDONLY, 0);
    OK(r);
    /* Sequential 4 KiB reads (served from windows read ahead). */
    for (long off = 0; off < SIZE; off += STEP) {
        assert_int_equal(shoal_read(r, back, STEP), STEP);
        assert_memory_equal(back, data + off, STEP);
    }
    assert_int_equal(shoal_read(r, back, STEP), 0);
    /* A write through another descriptor of this process shows at once,
     * inside a window the reader has already fetched. */
    assert_int_equal(shoal_lseek(r, 0, SEEK_SET), 0);
    assert_int_equal(shoal_read(r, back, STEP), STEP);
    assert_int_equal(shoal_read(r, back, STEP), STEP);
    memset(data + 3 * STEP, 0xAB, STEP);
    assert_int_equal(shoal_pwrite(w, data + 3 * STEP, STEP, 3 * STEP), STEP);
    assert_int_equal(shoal_read(r, back, STEP), STEP); /* block 2 */
    assert_memory_equal(back, data + 2 * STEP, STEP);
    assert_int_equal(shoal_read(r, back, STEP), STEP); /* block 3, rewritten */
    assert_memory_equal(back, data + 3 * STEP, STEP);
    /* So does a truncate. */
    OK(shoal_ftruncate(w, 5 * STEP));
    assert_int_equal(shoal_read(r, back, STEP), STEP);
    assert_int_equal(shoal_read(r, back, STEP), 0);
    OK(shoal_close(r));
    OK(shoal_close(w));
}

static void test_small_writes_are_gathered_and_sent_at_close(void **state)
{
    (void)state;
    struct shoal_write_paths before, after;
    OK(shoal_write_paths(&before));
    OK(shoal_mkdir(at("gathered", NULL), 0755));
    const char *f = at("gathered", "log");
    int w = shoal_open(f, O_CREAT | O_WRONLY | O_APPEND, 0644);
    OK(w);
    char line[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(line, sizeof line, "line %09d\n", i); /* 15 bytes */
        assert_int_equal(shoal_write(w, line, 15), 15);
    }
    struct stat st;
    OK(shoal_fstat(w, &st));
    assert_int_equal(st.st_size, 15000); /* buffered bytes count in the size */
    OK(shoal_close(w));
    OK(shoal_write_paths(&after));
    assert_int_equal(after.gathered_writes - before.gathered_writes, 1000);
    assert_int_equal(after.gathered_bytes - before.gathered_bytes, 15000);
    /* One send, at the close (the cluster waits a minute before age sends). */
    assert_int_equal(after.gathered_sends - before.gathered_sends, 1);
    assert_int_equal(after.direct_writes, before.direct_writes);
    int r = shoal_open(f, O_RDONLY, 0);
    OK(r);
    char back[16] = {0};
    assert_int_equal(shoal_pread(r, back, 15, 999 * 15), 15);
    assert_string_equal(back, "line 000000999\n");
    OK(shoal_close(r));
    assert_int_equal(shoal_write_paths(NULL), -1);
    assert_int_equal(errno, EFAULT);
}

static void test_metadata_calls(void **state)
{
    (void)state;
    OK(shoal_mkdir(at("meta", NULL), 0755));
    const char *f = at("meta", "f");
    put_file(f, "hello");
    struct stat st, lst;

    /* Symlinks. */
    OK(shoal_symlink("f", at("meta", "rel")));
    OK(shoal_symlink(f, at("meta", "abs")));
    char target[64] = {0};
    assert_int_equal(shoal_readlink(at("meta", "rel"), target, sizeof target), 1);
    assert_string_equal(target, "f");
    OK(shoal_lstat(at("meta", "abs"), &lst));
    assert_true(S_ISLNK(lst.st_mode));
    assert_int_equal(lst.st_size, strlen(f));
    OK(shoal_stat(at("meta", "abs"), &st));
    assert_true(S_ISREG(st.st_mode));
    struct stat real;
    OK(shoal_stat(f, &real));
    assert_int_equal(st.st_ino, real.st_ino);
    assert_content(at("meta", "rel"), "hello");
    FAILS(shoal_open(at("meta", "rel"), O_RDONLY | O_NOFOLLOW, 0), ELOOP);
    OK(shoal_symlink("loop2", at("meta", "loop1")));
    OK(shoal_symlink("loop1", at("meta", "loop2")));
    FAILS(shoal_stat(at("meta", "loop1"), &st), ELOOP);

    /* Modes, owners, times. */
    OK(shoal_chmod(f, 0640));
    OK(shoal_stat(f, &st));
    assert_int_equal(st.st_mode, S_IFREG | 0640);
    OK(shoal_chown(f, (uid_t)-1, (gid_t)-1));
    OK(shoal_chown(f, getuid(), getgid()));
    OK(shoal_stat(f, &st));
    assert_int_equal(st.st_uid, getuid());
    struct timespec t[2] = {{1500000000, 1}, {1600000000, 2}};
    OK(shoal_utimens(f, t, 0));
    OK(shoal_stat(f, &st));
    assert_int_equal(st.st_atim.tv_sec, 1500000000);
    assert_int_equal(st.st_mtim.tv_sec, 1600000000);
    assert_int_equal(st.st_mtim.tv_nsec, 2);
    struct timespec omit[2] = {{0, UTIME_OMIT}, {1700000000, 0}};
    OK(shoal_utimens(f, omit, 0));
    OK(shoal_stat(f, &st));
    assert_int_equal(st.st_atim.tv_sec, 1500000000);
    assert_int_equal(st.st_mtim.tv_sec, 1700000000);
    struct timespec bad[2] = {{0, 2000000000}, {0, 0}};
    FAILS(shoal_utimens(f, bad, 0), EINVAL);
    OK(shoal_access(f, R_OK | W_OK));
    FAILS(shoal_access(at("meta", "none"), F_OK), ENOENT);

    /* Descriptor calls: fchmod, futimens, dup, append, truncate. */
    int fd = shoal_open(f, O_RDWR | O_APPEND, 0);
    OK(fd);
    OK(shoal_fchmod(fd, 0600));
    OK(shoal_futimens(fd, NULL));
    OK(shoal_fstat(fd, &st));
    assert_int_equal(st.st_mode, S_IFREG | 0600);
    assert_true(st.st_mtim.tv_sec > 1700000000);
    assert_int_equal(shoal_write(fd, " world", 6), 6);
    assert_int_equal(shoal_lseek(fd, 0, SEEK_CUR), 11);
    OK(shoal_close(fd));
    assert_content(f, "hello world");

    fd = shoal_open(f, O_RDWR, 0);
    int fd2 = shoal_dup(fd);
    OK(fd2);
    assert_true(fd2 != fd);
    char buf[16] = {0};
    assert_int_equal(shoal_read(fd, buf, 5), 5);
    assert_int_equal(shoal_read(fd2, buf, 6), 6); /* the offset is shared */
    assert_string_equal(buf, " world");
    assert_int_equal(shoal_lseek(fd2, 0, SEEK_END), 11);
    OK(shoal_ftruncate(fd, 100000));
    OK(shoal_fstat(fd, &st));
    assert_int_equal(st.st_size, 100000);
    assert_int_equal(shoal_pread(fd, buf, 4, 50000), 4);
    assert_memory_equal(buf, "\0\0\0\0", 4); /* a hole reads as zeros */
    assert_int_equal(shoal_lseek(fd, 10, SEEK_DATA), 10);
    FAILS(shoal_lseek(fd, 100000, SEEK_DATA), ENXIO);
    OK(shoal_truncate(f, 5));
    OK(shoal_close(fd2));
    OK(shoal_close(fd));
    assert_content(f, "hello");
    fd = shoal_open(f, O_WRONLY | O_TRUNC, 0);
    OK(fd);
    OK(shoal_close(fd));
    OK(shoal_stat(f, &st));
    assert_int_equal(st.st_size, 0);

    /* A file unlinked while open stays readable until closed. */
    put_file(at("meta", "doomed"), "still here");
    fd = shoal_open(at("meta", "doomed"), O_RDONLY, 0);
    OK(fd);
    OK(shoal_unlink(at("meta", "doomed")));
    FAILS(shoal_stat(at("meta", "doomed"), &st), ENOENT);
    memset(buf, 0, sizeof buf);
    assert_int_equal(shoal_read(fd, buf, sizeof buf), 10);
    assert_string_equal(buf, "still here");
    OK(shoal_close(fd));

    /* Remove what was made. */
    OK(shoal_unlink(at("meta", "rel")));
    FAILS(shoal_lstat(at("meta", "rel"), &st), ENOENT);
    OK(shoal_stat(f, &st)); /* the target stays */
    OK(shoal_mkdir(at("meta", "gone"), 0755));
    OK(shoal_rmdir(at("meta", "gone")));
    FAILS(shoal_stat(at("meta", "gone"), &st), ENOENT);

    /* Capacity. */
    struct statvfs vfs;
    OK(shoal_statvfs("/", &vfs));
    assert_true(vfs.f_blocks > 0);
    assert_true(vfs.f_bavail <= vfs.f_blocks);
    assert_int_equal(vfs.f_namemax, SHOAL_NAME_MAX);
    struct statfs sfs;
    OK(shoal_statfs(f, &sfs));
    assert_int_equal(sfs.f_type, SHOAL_SUPER_MAGIC);
    assert_int_equal(sfs.f_blocks, vfs.f_blocks);
}

/* A lock request on `fd` of `type` over bytes [start, start+len). */
static int lock_range(int fd, int cmd, short type, off_t start, off_t len)
{
    struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    return shoal_fcntl_lock(fd, cmd, &l);
}

/* Adds 1 to the 8-byte counter at offset 0 of `fd`, `n` times, each under
 * a write lock on it. */
static int add_under_lock(int fd, int n)
{
    for (int i = 0; i < n; i++) {
        uint64_t v;
        if (lock_range(fd, F_SETLKW, F_WRLCK, 0, 8) < 0)
            return 30;
        if (shoal_pread(fd, &v, 8, 0) != 8)
            return 31;
        v++;
        if (shoal_pwrite(fd, &v, 8, 0) != 8)
            return 32;
        if (lock_range(fd, F_SETLK, F_UNLCK, 0, 8) < 0)
            return 33;
    }
    return 0;
}

/* What a child (another client: its own connection) finds of the parent's
 * write lock on bytes 0..9 of `path`. */
static int child_meets_the_lock(const char *path, pid_t parent)
{
    int fd = shoal_open(path, O_RDWR, 0);
    if (fd < 0)
        return 40;
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 100};
    if (shoal_fcntl_lock(fd, F_GETLK, &l) < 0 || l.l_type != F_WRLCK || l.l_start != 0 ||
        l.l_len != 10 || l.l_pid != parent)
        return 41;
    if (lock_range(fd, F_SETLK, F_RDLCK, 9, 1) != -1 || errno != EAGAIN)
        return 42;
    if (lock_range(fd, F_SETLK, F_WRLCK, 10, 10) < 0) /* beside it: free */
        return 43;
    if (shoal_flock(fd, LOCK_EX | LOCK_NB) < 0)
        return 44; /* flock locks never meet fcntl locks, as on Linux */
    return shoal_close(fd) < 0 ? 45 : 0;
}

static void on_alarm(int sig)
{
    (void)sig;
}

/* A child (another client) meets the parent's flock LOCK_EX and write lock
 * on all of `path`: LOCK_NB fails; a blocking flock and F_SETLKW wait until
 * a signal whose handler has no SA_RESTART ends them with EINTR. */
static int child_is_interrupted(const char *path)
{
    int fd = shoal_open(path, O_RDWR, 0);
    if (fd < 0)
        return 60;
    if (shoal_flock(fd, LOCK_SH | LOCK_NB) != -1 || errno != EWOULDBLOCK)
        return 61;
    struct sigaction sa = {.sa_handler = on_alarm}; /* no SA_RESTART */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) < 0)
        return 62;
    alarm(1);
    if (shoal_flock(fd, LOCK_EX) != -1 || errno != EINTR)
        return 63;
    alarm(1);
    if (lock_range(fd, F_SETLKW, F_WRLCK, 0, 0) != -1 || errno != EINTR)
        return 64;
    return shoal_close(fd) < 0 ? 65 : 0;
}

static int wait_child(pid_t pid)
{
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* wait_child, but a child still there after `secs` seconds is killed:
 * -2. */
static int wait_child_within(pid_t pid, int secs)
{
    for (int i = 0; i < secs * 50; i++) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -2;
}

static void test_record_locks_hold_across_clients(void **state)
{
    (void)state;
    OK(shoal_mkdir(at("locks", NULL), 0755));
    const char *path = at("locks", "counter");
    int fd = shoal_open(path, O_CREAT | O_EXCL | O_RDWR, 0644);
    OK(fd);
    uint64_t zero = 0;
    assert_int_equal(shoal_pwrite(fd, &zero, 8, 0), 8);

    OK(lock_range(fd, F_SETLK, F_WRLCK, 0, 10));
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(120);
        _exit(child_meets_the_lock(path, getppid()));
    }
    assert_int_equal(wait_child(pid), 0);
    OK(lock_range(fd, F_SETLK, F_UNLCK, 0, 0));

    /* A signal ends a wait for the parent's locks. */
    OK(shoal_flock(fd, LOCK_EX | LOCK_NB));
    OK(lock_range(fd, F_SETLK, F_WRLCK, 0, 0));
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(child_is_interrupted(path));
    assert_int_equal(wait_child_within(pid, 60), 0);
    OK(shoal_flock(fd, LOCK_UN));
    OK(lock_range(fd, F_SETLK, F_UNLCK, 0, 0));

    /* A read-only descriptor takes no write lock (EBADF, as fcntl says). */
    int ro = shoal_open(path, O_RDONLY, 0);
    OK(ro);
    FAILS(lock_range(ro, F_SETLK, F_WRLCK, 0, 1), EBADF);
    OK(shoal_close(ro));

    /* Two clients add under the lock: no update is lost. */
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(120);
        int cfd = shoal_open(path, O_RDWR, 0);
        _exit(cfd < 0 ? 50 : add_under_lock(cfd, 200));
    }
    assert_int_equal(add_under_lock(fd, 200), 0);
    assert_int_equal(wait_child(pid), 0);
    uint64_t v = 0;
    assert_int_equal(shoal_pread(fd, &v, 8, 0), 8);
    assert_int_equal(v, 400);
    OK(shoal_close(fd));
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s CLUSTER.toml [DIR]\n", argv[0]);
        return 2;
    }
    cluster_file = argv[1];
    if (argc == 3)
        top = argv[2];
    const struct CMUnitTest unconnected[] = {
        cmocka_unit_test(test_calls_before_connect_fail_with_enotconn),
    };
    const struct CMUnitTest connected[] = {
        cmocka_unit_test(test_connect_counts_users_and_refuses_another_cluster),
        cmocka_unit_test(test_data_round_trips_across_strip_boundaries),
        cmocka_unit_test(test_errors_are_posix_errnos),
        cmocka_unit_test(test_readdirplus_attributes_match_stat),
        cmocka_unit_test(test_a_listing_spans_several_batches),
        cmocka_unit_test(test_two_threads_write_disjoint_ranges_of_one_file),
        cmocka_unit_test(test_rename_replaces_an_existing_file),
        cmocka_unit_test(test_xattrs),
        cmocka_unit_test(test_directory_hints),
        cmocka_unit_test(test_a_forked_child_does_io_on_its_own_connection),
        cmocka_unit_test(test_attribute_changes_of_a_new_file_are_sent_as_one),
        cmocka_unit_test(test_small_sequential_reads_see_this_process_writes),
        cmocka_unit_test(test_small_writes_are_gathered_and_sent_at_close),
        cmocka_unit_test(test_metadata_calls),
        cmocka_unit_test(test_record_locks_hold_across_clients),
    };
    int failed = cmocka_run_group_tests_name("libshoal before connecting", unconnected, NULL, NULL);
    failed += cmocka_run_group_tests_name("libshoal", connected, connect_all, disconnect_all);
    return failed ? 1 : 0;
}
