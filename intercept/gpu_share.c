/* gpu_share.c - see gpu_share.h and the share table in alnair_shm.h. */
#define _GNU_SOURCE
#include "gpu_share.h"
#include "shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TABLE_MODE 0666            /* every limited process on the node takes part, whoever runs it */
#define LIVENESS_CHECK_NS 1000000000ull /* a crashed owner's window is reused within a second */
#define PPM 1000000ull

static int fail(char *err, size_t err_len, const char *what, const char *path)
{
    snprintf(err, err_len, "alnair: cannot %s GPU share table %s: %s", what, path, strerror(errno));
    return -1;
}

static struct flock slot_lock(int type, int slot)
{
    struct flock lk = {.l_type = (short)type, .l_whence = SEEK_SET,
                       .l_start = (off_t)(slot * sizeof(struct alnair_share_slot)),
                       .l_len = sizeof(struct alnair_share_slot)};
    return lk;
}

static int open_table(const uint8_t uuid[16], char *path, size_t path_len)
{
    int n = snprintf(path, path_len, "%s/" ALNAIR_SHARE_NAME_PREFIX, alnair_shm_dir());
    for (int i = 0; i < 16 && n + 2 < (int)path_len; i++) n += snprintf(path + n, path_len - (size_t)n, "%02x", uuid[i]);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, TABLE_MODE);
    if (fd >= 0) {
        fchmod(fd, TABLE_MODE); /* past the umask: other users' processes must write their slots */
        return fd;
    }
    return errno == EEXIST ? open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW) : -1;
}

int alnair_share_join(struct alnair_share *share, const uint8_t uuid[16], char *err, size_t err_len)
{
    char path[4096];
    struct stat st;
    share->fd = -1;
    int fd = open_table(uuid, path, sizeof path);
    if (fd < 0) return fail(err, err_len, "open", path);
    /* Pages reserved, not a sparse file: a full tmpfs fails here, not with SIGBUS later. */
    int rc = posix_fallocate(fd, 0, sizeof *share->table);
    if (rc != 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        errno = rc ? rc : EINVAL;
        fail(err, err_len, "size", path);
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, sizeof *share->table, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        fail(err, err_len, "map", path);
        close(fd);
        return -1;
    }
    for (int slot = 0; slot < ALNAIR_SHARE_SLOTS; slot++) {
        struct flock lk = slot_lock(F_WRLCK, slot);
        if (fcntl(fd, F_SETLK, &lk) == 0) {
            *share = (struct alnair_share){.fd = fd, .table = map, .slot = slot};
            __atomic_store_n(&share->table->slots[slot].pid, (int32_t)getpid(), __ATOMIC_RELAXED);
            return 0;
        }
    }
    errno = EBUSY;
    fail(err, err_len, "find a free slot in", path);
    munmap(map, sizeof *share->table);
    close(fd);
    return -1;
}

void alnair_share_set_quota(struct alnair_share *share, uint32_t quota_ppm)
{
    __atomic_store_n(&share->table->slots[share->slot].quota_ppm, quota_ppm, __ATOMIC_RELAXED);
}

/* Slots that hold a quota but whose owner is gone (it crashed before leaving). */
static uint64_t dead_slots(struct alnair_share *share)
{
    uint64_t dead = 0;
    for (int slot = 0; slot < ALNAIR_SHARE_SLOTS; slot++) {
        if (slot == share->slot || !__atomic_load_n(&share->table->slots[slot].quota_ppm, __ATOMIC_RELAXED)) continue;
        struct flock lk = slot_lock(F_WRLCK, slot);
        if (fcntl(share->fd, F_GETLK, &lk) == 0 && lk.l_type == F_UNLCK) dead |= 1ull << slot;
    }
    return dead;
}

int alnair_share_window(struct alnair_share *share, uint64_t now_ns, uint64_t *offset_ns, uint64_t *length_ns)
{
    if (now_ns - share->checked_ns >= LIVENESS_CHECK_NS) {
        share->dead = dead_slots(share);
        share->checked_ns = now_ns;
    }
    uint64_t total = 0, before = 0, mine = 0;
    int others = 0;
    for (int slot = 0; slot < ALNAIR_SHARE_SLOTS; slot++) {
        uint64_t quota = __atomic_load_n(&share->table->slots[slot].quota_ppm, __ATOMIC_RELAXED);
        if (!quota || (share->dead >> slot & 1)) continue;
        total += quota;
        others += slot != share->slot;
        if (slot < share->slot) before += quota;
        if (slot == share->slot) mine = quota;
    }
    uint64_t scale = total > PPM ? total : PPM; /* oversubscribed: everyone shrinks alike */
    *offset_ns = ALNAIR_SHARE_PERIOD_NS * before / scale;
    *length_ns = ALNAIR_SHARE_PERIOD_NS * mine / scale;
    return others;
}

void alnair_share_leave(struct alnair_share *share)
{
    if (share->fd >= 0) alnair_share_set_quota(share, 0);
}

void alnair_share_forget(struct alnair_share *share)
{
    if (share->fd < 0) return;
    munmap(share->table, sizeof *share->table);
    close(share->fd); /* the slot's lock is the parent's: closing here cannot drop it */
    share->fd = -1;
}
