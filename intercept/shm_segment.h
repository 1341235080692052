/*
 * shm_segment.h - create, publish and retire one writer's shared-memory segment.
 * Shared by the CUDA intercept and the test writer, so tests exercise the real code.
 */
#ifndef ALNAIR_SHM_SEGMENT_H
#define ALNAIR_SHM_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "alnair_shm.h"

struct alnair_segment {
    int fd;                           /* holds the liveness lock; -1 when closed */
    size_t size;                      /* header + record */
    struct alnair_shm_header *header; /* the mapping */
    void *record;                     /* header + header_size */
    char path[4096];
};

/* ALNAIR_SHM_DIR, or the default /dev/shm: where segments and GPU share tables live. */
const char *alnair_shm_dir(void);

/* Creates the segment for this process and kind in ALNAIR_SHM_DIR (default
 * /dev/shm). Returns 0, or -1 with a one-line reason in err. */
int alnair_segment_create(struct alnair_segment *seg, uint32_t kind, uint32_t record_size,
                          char *err, size_t err_len);

/* Brackets one publish of the record: readers retry while it is in progress.
 * Only one thread per segment may publish. */
void alnair_segment_publish_begin(struct alnair_segment *seg);
void alnair_segment_publish_end(struct alnair_segment *seg);

/* Unmaps and closes; with remove != 0 also unlinks (a clean exit). */
void alnair_segment_close(struct alnair_segment *seg, int remove);

/* At a clean exit, after the last publish: unlinks the file, unless a reader that serves exited writers'
 * records announced itself (ALNAIR_READER_MARKER). Keeps the mapping: another thread may still publish. */
void alnair_segment_retire(struct alnair_segment *seg);

/* For a fork child: drop the parent's mapping and descriptor without touching the
 * file, so the parent's segment stays the parent's. */
void alnair_segment_forget(struct alnair_segment *seg);

#endif
