/* shm_segment.c - see shm_segment.h and docs/shm-abi.md. */
#define _GNU_SOURCE
#include "shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SEGMENT_MODE 0640 /* owner read-write, group read at most */

static const char *kind_name(uint32_t kind)
{
    switch (kind) {
    case ALNAIR_KIND_CUDA: return "cuda";
    case ALNAIR_KIND_PYTHON: return "python";
    default: return "unknown";
    }
}

static uint64_t pid_namespace_inode(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Field 22 of /proc/self/stat; the comm field (2) may contain spaces and ')'. */
static uint64_t start_time_ticks(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static void copy_env(char *dst, size_t len, const char *var)
{
    const char *v = getenv(var);
    if (v) strncpy(dst, v, len - 1);
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fill_header(struct alnair_shm_header *h, uint32_t kind, uint32_t record_size)
{
    h->magic = ALNAIR_SHM_MAGIC;
    h->abi_version = ALNAIR_SHM_ABI_VERSION;
    h->header_size = sizeof *h;
    h->record_kind = kind;
    h->record_size = record_size;
    h->writer_pid = (int32_t)getpid();
    h->pid_namespace_inode = pid_namespace_inode();
    h->start_time_ticks = start_time_ticks();
    copy_env(h->pod_uid, sizeof h->pod_uid, "ALNAIR_POD_UID");
    copy_env(h->container_id, sizeof h->container_id, "ALNAIR_CONTAINER_ID");
    FILE *f = fopen("/proc/self/comm", "re");
    if (f) {
        if (fgets(h->comm, sizeof h->comm, f)) h->comm[strcspn(h->comm, "\n")] = '\0';
        fclose(f);
    }
    h->update_time_ns = realtime_ns();
}

static int fail(char *err, size_t err_len, const char *what, const char *path)
{
    snprintf(err, err_len, "alnair: cannot %s %s: %s", what, path, strerror(errno));
    return -1;
}

/* The lock is the liveness signal: POSIX record locks belong to the process, are
 * not inherited by fork children and vanish when the process dies. */
static int lock_whole_file(int fd)
{
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    return fcntl(fd, F_SETLK, &lk);
}

const char *alnair_shm_dir(void)
{
    const char *dir = getenv("ALNAIR_SHM_DIR");
    return dir && *dir ? dir : ALNAIR_SHM_DEFAULT_DIR;
}

int alnair_segment_create(struct alnair_segment *seg, uint32_t kind, uint32_t record_size,
                          char *err, size_t err_len)
{
    const char *dir = alnair_shm_dir();
    struct stat dir_st;
    /* As the exporter refuses such a directory, a writer does not publish there: anyone could delete the segment. */
    if (stat(dir, &dir_st) == 0 && (dir_st.st_mode & S_IWOTH) && !(dir_st.st_mode & S_ISVTX)) {
        snprintf(err, err_len, "alnair: not publishing to %s: it is writable by every user without the sticky bit, "
                 "so any of them could delete this process's segment (chmod 1777 it, as /dev/shm is)", dir);
        return -1;
    }
    struct alnair_shm_header probe = {0};
    fill_header(&probe, kind, record_size);
    snprintf(seg->path, sizeof seg->path, "%s/" ALNAIR_SHM_NAME_PREFIX "%s.%llu.%d.%llu", dir,
             kind_name(kind), (unsigned long long)probe.pid_namespace_inode, probe.writer_pid,
             (unsigned long long)probe.start_time_ticks);
    /* Built under a hidden name and renamed once locked and initialised, so a
     * reader never sees a half-made segment or mistakes it for a dead one. */
    char tmp[sizeof seg->path + 8];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, seg->path + strlen(dir) + 1);
    seg->size = sizeof probe + record_size;
    seg->fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, SEGMENT_MODE);
    if (seg->fd < 0) return fail(err, err_len, "create", tmp);
    if (lock_whole_file(seg->fd) != 0) {
        fail(err, err_len, "lock", tmp);
        goto undo;
    }
    /* Reserve the pages now: on a full tmpfs a sparse file would SIGBUS the
     * program at its first publish instead of failing here. */
    int rc = posix_fallocate(seg->fd, 0, (off_t)seg->size);
    if (rc != 0) {
        errno = rc;
        fail(err, err_len, "allocate", tmp);
        goto undo;
    }
    void *map = mmap(NULL, seg->size, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
    if (map == MAP_FAILED) {
        fail(err, err_len, "map", tmp);
        goto undo;
    }
    seg->header = map;
    *seg->header = probe;
    seg->record = (char *)map + sizeof probe;
    if (rename(tmp, seg->path) != 0) {
        fail(err, err_len, "publish", seg->path);
        munmap(map, seg->size);
        goto undo;
    }
    return 0;
undo:
    unlink(tmp);
    close(seg->fd);
    seg->fd = -1;
    return -1;
}

void alnair_segment_publish_begin(struct alnair_segment *seg)
{
    uint64_t s = __atomic_load_n(&seg->header->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&seg->header->seq, s + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE); /* odd seq is visible before any field */
}

void alnair_segment_publish_end(struct alnair_segment *seg)
{
    seg->header->update_time_ns = realtime_ns();
    uint64_t s = __atomic_load_n(&seg->header->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&seg->header->seq, s + 1, __ATOMIC_RELEASE);
}

void alnair_segment_forget(struct alnair_segment *seg)
{
    if (seg->fd < 0) return;
    munmap(seg->header, seg->size);
    close(seg->fd); /* a POSIX lock is the parent's: closing here cannot drop it */
    seg->fd = -1;
}

static int reader_lingers(void)
{
    char marker[4096];
    struct stat st;
    snprintf(marker, sizeof marker, "%s/" ALNAIR_READER_MARKER, alnair_shm_dir());
    return stat(marker, &st) == 0 && S_ISREG(st.st_mode);
}

void alnair_segment_retire(struct alnair_segment *seg)
{
    if (seg->fd >= 0 && !reader_lingers()) unlink(seg->path);
}

void alnair_segment_close(struct alnair_segment *seg, int remove)
{
    if (seg->fd < 0) return;
    if (remove) unlink(seg->path);
    alnair_segment_forget(seg);
}
