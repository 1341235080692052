/*
 * gpu_share.h - this process's place in a GPU's share table (see alnair_shm.h):
 * where it publishes its busy timeline and reads the other processes'.
 * Used by the monitor thread only, except alnair_share_leave (the exit).
 *
 * Every limited process on the node may write the table, so nothing in it is
 * trusted: it is never mapped, only read into a private copy, and a slot counts
 * only while a live process holds its lock (gpu_share.c has the rules).
 */
#ifndef ALNAIR_GPU_SHARE_H
#define ALNAIR_GPU_SHARE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "alnair_shm.h"
#include "turns.h"

struct alnair_share {
    int fd;                  /* the table; holds this process's slot lock. -1 when not joined */
    int slot;                /* this process's slot in it */
    int32_t pid;             /* written into the slot, for people reading the file */
    uint32_t quota_ppm;      /* this process's quota, rewritten into its slot every tick */
    uint8_t uuid[16];        /* names the table's path, to rejoin it when the file is replaced */
    struct alnair_share_busy busy;   /* this process's busy timeline, written with its slot (gpu_time.c fills it) */
    uint64_t written_until_ms; /* the timeline's until_ms as last written, which a turn's release counts from */
    struct alnair_share_table table; /* the table as last read, for the peers' timelines */
    uint64_t counted;        /* other slots that count: a live process held their lock when checked */
    int32_t holder[ALNAIR_SHARE_SLOTS]; /* the pid that held each counted slot (0: not visible from here) */
    uint64_t checked_ns;     /* the last liveness check: every slot, and whether the path is still ours */
    uint64_t probed_ns;      /* the last look at slots not counted yet (a process that just joined) */
    int rejoin_failing;      /* the table at the path could not be joined: said once, tried every check */
    pthread_mutex_t switching; /* held while fd and slot change and while the slot is written: the exit and the
                                  launches that wait for turns must not use a closed fd, nor undo a newer word */
};

/* Opens (or with create, creates) the table of the GPU with this UUID in
 * ALNAIR_SHM_DIR and claims a free slot. Returns 0, or -1 with a one-line reason
 * in err (errno ENOENT: there is no table and create was not asked). */
int alnair_share_join(struct alnair_share *share, const uint8_t uuid[16], int create, char *err, size_t err_len);

/* Publishes this process's quota (parts per million, at most 10^6, or ALNAIR_SHARE_UNLIMITED for a
 * process without a limit), its busy timeline and its turn's word: writes its slot, which also repairs
 * whatever someone else wrote there. */
void alnair_share_set_quota(struct alnair_share *share, uint32_t quota_ppm, const struct alnair_turn *turn);

/* Any thread: writes the turn's word alone, now (a launch that waits for turns, the monitor's decision). */
void alnair_share_write_turn(struct alnair_share *share, const struct alnair_turn *turn);

/* Any thread: the table as the file holds it now, into copy (a launch that waits for turns reads it often);
 * returns 0, or -1 when this process is not in a table. */
int alnair_share_peek(struct alnair_share *share, struct alnair_share_table *copy);

/* Reads the table into share->table. Once a second it also checks which slots are
 * held (share->counted: a bit per slot, this process's never set) and moves to a new
 * table renamed over the old one; between checks, a slot that begins to look used is
 * counted within ALNAIR_SHARE_PERIOD_NS once its lock is seen held. */
void alnair_share_read(struct alnair_share *share, uint64_t now_ns);

/* Gives the slot up (a clean exit). */
void alnair_share_leave(struct alnair_share *share);

/* For a fork child: the slot is the parent's; drop it without touching it. */
void alnair_share_forget(struct alnair_share *share);

#endif
