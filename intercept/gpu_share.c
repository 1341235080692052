/*
 * gpu_share.c - see gpu_share.h and the share table in alnair_shm.h.
 *
 * The table is mode 0666: any local user may truncate it, grow it, fill it with
 * garbage or rename another file over it, at any time. So:
 *   - it is never mapped (a mapping of a truncated file kills with SIGBUS): each
 *     tick reads all 5120 bytes with pread into a private copy, and a short read
 *     means the missing slots are empty (a table of a version before the busy
 *     timelines is 512 bytes: its processes show no busy time);
 *   - this process writes only its own slot, with pwrite, every tick, so a
 *     truncation or an overwrite of it is repaired within a tick; what it says of
 *     itself comes from its own state, never from what the file says of it;
 *   - another slot counts only if its quota is 1..10^6 ppm and a live process held
 *     its lock at the last check (F_GETLK), one slot per pid we can see: garbage in
 *     a free slot never counts, and a process holding many slots counts once;
 *   - once a second the path is compared with the open file: a table renamed over
 *     it (or its removal) makes this process join the table now at the path, so
 *     the processes re-converge on one table instead of splitting in two.
 * All of it runs on the monitor thread, but for the turn word (turns.h): a launch that waits for
 * turns reads the table and writes its own word.
 */
#define _GNU_SOURCE
#include "gpu_share.h"
#include "intercept.h"
#include "shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TABLE_MODE 0666            /* every process using the GPU takes part, whoever runs it */
#define LIVENESS_CHECK_NS 1000000000ull /* a crashed owner's slot is reused, a replaced table left, within a second */
#define PROBE_NS ALNAIR_SHARE_PERIOD_NS /* a process that just joined is counted within a period */
#define PPM 1000000u
#define PATH_LEN 4096

static int fail(char *err, size_t err_len, const char *what, const char *path)
{
    /* A long ALNAIR_SHM_DIR cuts the line short, which is all a log line needs. */
    if (snprintf(err, err_len, "alnair: cannot %s GPU share table %s: %s", what, path, strerror(errno)) < 0) *err = 0;
    return -1;
}

static struct flock slot_lock(int type, int slot)
{
    struct flock lk = {.l_type = (short)type, .l_whence = SEEK_SET,
                       .l_start = (off_t)(slot * sizeof(struct alnair_share_slot)),
                       .l_len = sizeof(struct alnair_share_slot)};
    return lk;
}

static void table_path(const uint8_t uuid[16], char *path, size_t path_len)
{
    int n = snprintf(path, path_len, "%s/" ALNAIR_SHARE_NAME_PREFIX, alnair_shm_dir());
    for (int i = 0; i < 16 && n + 2 < (int)path_len; i++) n += snprintf(path + n, path_len - (size_t)n, "%02x", uuid[i]);
}

/* O_NONBLOCK and O_NOFOLLOW: a FIFO or a link put at the path must not stall or
 * redirect the monitor thread; only a regular file is a table. */
static int open_table(const char *path, int create, char *err, size_t err_len)
{
    int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    int fd = create ? open(path, flags | O_CREAT | O_EXCL, TABLE_MODE) : -1;
    if (fd >= 0) fchmod(fd, TABLE_MODE); /* past the umask: other users' processes must write their slots */
    else if (!create || errno == EEXIST) fd = open(path, flags);
    if (fd < 0) return fail(err, err_len, "open", path);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (snprintf(err, err_len, "alnair: cannot use GPU share table %s: not a regular file", path) < 0) *err = 0;
        close(fd);
        return -1;
    }
    return fd;
}

static int claim_slot(int fd)
{
    for (int slot = 0; slot < ALNAIR_SHARE_SLOTS; slot++) {
        struct flock lk = slot_lock(F_WRLCK, slot);
        if (fcntl(fd, F_SETLK, &lk) == 0) return slot;
    }
    return -1;
}

static off_t busy_at(const struct alnair_share *share)
{
    return (off_t)offsetof(struct alnair_share_table, busy[0]) + (off_t)share->slot * (off_t)sizeof share->busy;
}

/* The slot and the timeline with the turn's word as it is now (NULL: none); share->switching held, but by a join. */
static int write_slot(struct alnair_share *share, uint32_t quota_ppm, const struct alnair_turn *turn)
{
    struct alnair_share_slot mine = {.quota_ppm = quota_ppm, .pid = share->pid};
    off_t at = (off_t)share->slot * (off_t)sizeof mine;
    share->busy.turn = turn ? alnair_turn_word(turn, share->busy.until_ms) : 0;
    share->written_until_ms = share->busy.until_ms;
    if (pwrite(share->fd, &mine, sizeof mine, at) != (ssize_t)sizeof mine) return -1;
    return pwrite(share->fd, &share->busy, sizeof share->busy, busy_at(share)) == (ssize_t)sizeof share->busy ? 0 : -1;
}

int alnair_share_join(struct alnair_share *share, const uint8_t uuid[16], int create, char *err, size_t err_len)
{
    char path[PATH_LEN];
    *share = (struct alnair_share){.fd = -1, .slot = -1, .pid = (int32_t)getpid()};
    memcpy(share->uuid, uuid, sizeof share->uuid);
    pthread_mutex_init(&share->switching, NULL);
    table_path(uuid, path, sizeof path);
    int fd = open_table(path, create, err, err_len);
    if (fd < 0) return -1;
    share->fd = fd;
    share->slot = claim_slot(fd);
    if (share->slot < 0) errno = EBUSY;
    /* The write reserves the slot's bytes: a full tmpfs fails here, where it can be said. */
    if (share->slot < 0 || write_slot(share, 0, NULL) != 0) {
        fail(err, err_len, share->slot < 0 ? "find a free slot in" : "write", path);
        close(fd);
        share->fd = -1;
        return -1;
    }
    return 0;
}

void alnair_share_set_quota(struct alnair_share *share, uint32_t quota_ppm, const struct alnair_turn *turn)
{
    share->quota_ppm = quota_ppm < PPM || quota_ppm == ALNAIR_SHARE_UNLIMITED ? quota_ppm : PPM;
    pthread_mutex_lock(&share->switching);
    write_slot(share, share->quota_ppm, turn); /* failing (a full tmpfs): the others miss us until one gets through */
    pthread_mutex_unlock(&share->switching);
}

static int write_word(const struct alnair_share *share, uint32_t word)
{
    off_t at = busy_at(share) + (off_t)offsetof(struct alnair_share_busy, turn);
    return pwrite(share->fd, &word, sizeof word, at) == (ssize_t)sizeof word ? 0 : -1;
}

void alnair_share_write_turn(struct alnair_share *share, const struct alnair_turn *turn)
{
    pthread_mutex_lock(&share->switching);
    if (share->fd >= 0) write_word(share, alnair_turn_word(turn, share->written_until_ms)); /* failing: as a slot's */
    pthread_mutex_unlock(&share->switching);
}

/* The whole table as the file holds it now; bytes past its end are empty slots. */
static void read_table(int fd, struct alnair_share_table *copy)
{
    ssize_t n = pread(fd, copy, sizeof *copy, 0);
    if (n < 0) n = 0;
    memset((char *)copy + n, 0, sizeof *copy - (size_t)n);
}

int alnair_share_peek(struct alnair_share *share, struct alnair_share_table *copy)
{
    pthread_mutex_lock(&share->switching);
    int fd = share->fd;
    if (fd >= 0) read_table(fd, copy);
    pthread_mutex_unlock(&share->switching);
    return fd >= 0 ? 0 : -1;
}

static int plausible(uint32_t quota_ppm)
{
    return (quota_ppm && quota_ppm <= PPM) || quota_ppm == ALNAIR_SHARE_UNLIMITED;
}

/* Who holds slot's lock: a pid > 0, or 0 for a process in a pid namespace we
 * cannot see; -1 for nobody, or only an open file description lock (l_pid -1),
 * which no Alnair process takes. This process's own locks never show. */
static int32_t holder_of(int fd, int slot)
{
    struct flock lk = slot_lock(F_WRLCK, slot);
    if (fcntl(fd, F_GETLK, &lk) != 0 || lk.l_type == F_UNLCK || lk.l_pid < 0) return -1;
    return lk.l_pid;
}

static int pid_counted(const struct alnair_share *share, int32_t pid)
{
    for (int slot = 0; slot < ALNAIR_SHARE_SLOTS; slot++)
        if ((share->counted >> slot & 1) && share->holder[slot] == pid) return 1;
    return 0;
}

/* A slot not counted yet that would count if its lock is held. */
static int candidate(const struct alnair_share *share, const struct alnair_share_table *t, int slot)
{
    return slot != share->slot && !(share->counted >> slot & 1) && plausible(t->slots[slot].quota_ppm);
}

/* Counts the candidates a live process holds, each pid once (in slot order, so
 * every process picks the same slot of a pid that holds several). */
static void count_held(struct alnair_share *share, const struct alnair_share_table *t)
{
    for (int slot = 0; slot < ALNAIR_SHARE_SLOTS; slot++) {
        if (!candidate(share, t, slot)) continue;
        int32_t pid = holder_of(share->fd, slot);
        if (pid < 0 || (pid > 0 && pid_counted(share, pid))) continue;
        share->counted |= 1ull << slot;
        share->holder[slot] = pid;
    }
}

/* The path no longer names our table: another file was renamed over it, or it was removed. */
static int replaced(const struct alnair_share *share, const char *path)
{
    struct stat at, ours;
    if (fstat(share->fd, &ours) != 0) return 0;
    if (lstat(path, &at) != 0) return errno == ENOENT;
    return at.st_dev != ours.st_dev || at.st_ino != ours.st_ino;
}

/* Joins the table now at the path, so that every process re-converges on one.
 * If it cannot (no free slot, not a file we may write), it stays where it is: the
 * processes still there take turns, and it says so once and tries every check. */
static void rejoin(struct alnair_share *share, const char *path)
{
    char err[512];
    int fd = open_table(path, 1, err, sizeof err);
    int slot = fd >= 0 ? claim_slot(fd) : -1;
    if (slot < 0) {
        if (fd >= 0) {
            errno = EBUSY;
            fail(err, sizeof err, "find a free slot in", path);
            close(fd);
        }
        if (!share->rejoin_failing) alnair_log("%s (it replaced the table this process shares; staying in the old one)", err);
        share->rejoin_failing = 1;
        return;
    }
    pthread_mutex_lock(&share->switching);
    close(share->fd); /* drops our lock there: the processes left in the old table stop counting us */
    share->fd = fd;
    share->slot = slot;
    write_slot(share, share->quota_ppm, NULL); /* the turn's word follows at the next tick */
    pthread_mutex_unlock(&share->switching);
    share->rejoin_failing = 0;
    share->counted = 0;
}

/* The liveness check: the path first, then which slots count, afresh. */
static void check(struct alnair_share *share, struct alnair_share_table *t)
{
    char path[PATH_LEN];
    table_path(share->uuid, path, sizeof path);
    if (replaced(share, path)) rejoin(share, path);
    read_table(share->fd, t);
    share->counted = 0;
    count_held(share, t);
}

static int any_candidate(const struct alnair_share *share, const struct alnair_share_table *t)
{
    for (int slot = 0; slot < ALNAIR_SHARE_SLOTS; slot++)
        if (candidate(share, t, slot)) return 1;
    return 0;
}

void alnair_share_read(struct alnair_share *share, uint64_t now_ns)
{
    struct alnair_share_table *table = &share->table;
    if (now_ns - share->checked_ns >= LIVENESS_CHECK_NS) {
        check(share, table);
        share->checked_ns = share->probed_ns = now_ns;
        return;
    }
    read_table(share->fd, table);
    /* A slot that is not counted adds only once its lock is seen held: garbage never counts. */
    if (now_ns - share->probed_ns >= PROBE_NS && any_candidate(share, table)) {
        count_held(share, table);
        share->probed_ns = now_ns;
    }
}

void alnair_share_leave(struct alnair_share *share)
{
    /* Called at exit, beside the monitor thread: mid-rejoin it leaves the slot to the
     * exit, whose dropped lock frees it within a second, rather than wait. */
    if (pthread_mutex_trylock(&share->switching) != 0) return;
    if (share->fd >= 0) write_slot(share, 0, NULL); /* the timeline stays: the others account its last ms; no turn */
    pthread_mutex_unlock(&share->switching);
}

void alnair_share_forget(struct alnair_share *share)
{
    if (share->fd < 0) return;
    close(share->fd); /* the slot's lock is the parent's: closing here cannot drop it */
    share->fd = -1;
}
