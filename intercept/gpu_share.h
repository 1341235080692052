/*
 * gpu_share.h - this process's place in a GPU's share table (see alnair_shm.h):
 * the window of every period in which it may launch work on that GPU.
 * Used by the monitor thread only.
 */
#ifndef ALNAIR_GPU_SHARE_H
#define ALNAIR_GPU_SHARE_H

#include <stddef.h>
#include <stdint.h>

#include "alnair_shm.h"

struct alnair_share {
    int fd;                          /* holds the slot's lock; -1 when not joined */
    struct alnair_share_table *table;
    int slot;
    uint64_t dead;                   /* slots with a quota but no owner, at the last check */
    uint64_t checked_ns;             /* when dead was last refreshed */
};

/* Opens (or creates) the table of the GPU with this UUID in ALNAIR_SHM_DIR and
 * claims a free slot. Returns 0, or -1 with a one-line reason in err. */
int alnair_share_join(struct alnair_share *share, const uint8_t uuid[16], char *err, size_t err_len);

/* Publishes this process's quota (parts per million of the period). */
void alnair_share_set_quota(struct alnair_share *share, uint32_t quota_ppm);

/* This process's window: offset and length (ns) within the period, laid out
 * from every live slot as of now. Returns how many other processes have one. */
int alnair_share_window(struct alnair_share *share, uint64_t now_ns, uint64_t *offset_ns, uint64_t *length_ns);

/* Gives the window up (a clean exit): the others' layouts close the gap. */
void alnair_share_leave(struct alnair_share *share);

/* For a fork child: the slot is the parent's; drop it without touching it. */
void alnair_share_forget(struct alnair_share *share);

#endif
