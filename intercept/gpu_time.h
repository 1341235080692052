/*
 * gpu_time.h - the GPU time a process gets on one device, measured from its busy spans.
 *
 * A process is busy on a device from a launch onto an empty queue until a call that waits
 * for the GPU (a synchronize) returns. Alone, that is its GPU time. On a time-sliced GPU
 * the processes busy at the same moment split it (measured on the H200: evenly, in ~2 ms
 * slices), so every millisecond of a process's busy time counts 1 / (processes busy then).
 * Each process publishes its recent milliseconds in the GPU's share table (alnair_shm.h)
 * and reads everyone else's. The GPU's own busy time then scales it (device_busy.h), so the
 * GPU's idle gaps inside a span do not count; docs/intercept.md gives the errors.
 *
 * Every function takes the time as an argument, so a simulation on a virtual clock drives
 * this module exactly as the library does (tests/intercept/programs/gpu_time_sim.c).
 */
#ifndef ALNAIR_GPU_TIME_H
#define ALNAIR_GPU_TIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "alnair_shm.h"
#include "device_busy.h"

#define ALNAIR_GPU_TIME_PENDING_MS 256 /* busy ms not yet final: a monitor tick later than this loses the oldest */
#define ALNAIR_GPU_TIME_HISTORY_MS 64  /* final ms waiting for the peers' timelines */

struct alnair_gpu_time {
    _Atomic uint64_t busy_since_ns; /* the open busy span's start (moved up at each tick); 0: idle */
    _Atomic int syncing;            /* threads inside a call that waits for the GPU */
    _Atomic int gate_waiting;       /* threads whose launch waits for the limit (compute_limit.c) */
    _Atomic int gate_waited;        /* a launch waited since the last tick */
    uint32_t share_ppm;             /* this process's compute share, published with its timeline; 0: none */
    pthread_mutex_t lock;           /* ends of spans (the syncs) against the monitor's tick */
    uint32_t pending[ALNAIR_GPU_TIME_PENDING_MS]; /* busy ns of ms m at m % PENDING_MS, m >= final_ms */
    _Atomic uint64_t turn_since_ns; /* its turn (turns.h) runs since then (moved up at each tick); 0: none */
    uint32_t turn_pending[ALNAIR_GPU_TIME_PENDING_MS]; /* ns of its turns in ms m, as `pending` */
    uint64_t final_ms;              /* the ms before this one will not change */
    /* The monitor's own (no lock): */
    uint32_t history[ALNAIR_GPU_TIME_HISTORY_MS]; /* busy ns of final ms m at m % HISTORY_MS, m >= accounted_ms */
    uint32_t turn_history[ALNAIR_GPU_TIME_HISTORY_MS]; /* ns of its turns in final ms m, as `history` */
    uint64_t wanting;               /* bit m % HISTORY_MS: in final ms m it had work or waited to launch */
    double last_share;              /* the part of its busy time that was its GPU time, in the latest busy ms */
    uint64_t accounted_ms;          /* the ms before this one are in the totals */
    uint64_t launches_seen, launches_moved_ns; /* a span no call ends closes once launches stop */
    double divided_ns;              /* its busy time, each ms divided among the processes busy in it */
    double all_ns;                  /* the time any process of the table (or this one) was busy */
    int turns_on;                   /* saturated since the GPU's busy part was last under ALNAIR_DEVICE_TURNS_OFF */
    struct alnair_device_busy device; /* the GPU's own busy time, which the divided time is scaled to */
    double charged_ns;              /* the highest scaled time the limits' debts were corrected to */
    _Atomic uint64_t gpu_time_ns;   /* the totals, published: the divided time scaled (the highest) */
    _Atomic uint64_t busy_ns;
};

/* Zeroed (a static device, a fork child's reset) is idle and initialized: glibc's mutex initializer is zeros. */
void alnair_gpu_time_init(struct alnair_gpu_time *g);

/* A launch at now found the process idle: a busy span begins (one load and a branch when it is busy). */
void alnair_gpu_time_begin(struct alnair_gpu_time *g, uint64_t now_ns);
static inline int alnair_gpu_time_busy(struct alnair_gpu_time *g)
{
    return atomic_load_explicit(&g->busy_since_ns, memory_order_relaxed) != 0;
}

/* A call that waited for the GPU returned at now: the queue is empty, the span ends. */
void alnair_gpu_time_end(struct alnair_gpu_time *g, uint64_t now_ns);

/* Whether this process runs a turn (turns.h) from now: its peers hold for it, so the GPU's time in it is the
 * process's for the cap, used or not (any thread; a lock only where it changes). */
void alnair_gpu_time_turn(struct alnair_gpu_time *g, int taken, uint64_t now_ns);

/* Monitor tick at now: the open span counts up to now, the ms before now become final, and
 * `mine` (if not NULL) gets the timeline to publish. `launches` is the device's launch count. */
void alnair_gpu_time_close(struct alnair_gpu_time *g, uint64_t now_ns, uint64_t launches, struct alnair_share_busy *mine);

/* What a tick's accounting tells the limits (compute_limit.c). A process wants the GPU in a ms when it had
 * work there or waited to launch; the processes wanting a ms are entitled to the GPU time it delivered in
 * proportion to their weights: a compute share's, and for each process without one an equal part of what
 * the shares leave (at least ALNAIR_SHARE_REST_FLOOR_PPM). */
struct alnair_gpu_time_tick {
    uint64_t ms;             /* ms accounted */
    double used_ns;          /* the GPU time in them, at the latest scale */
    double turn_idle_ns;     /* the GPU's idle time in them during this process's turns while a peer waited */
    double corrected_ns;     /* what the GPU time published grew by beyond that: earlier ms valued again as the
                                GPU's samples for them came (either sign), so a cap charges what is published */
    double excess_ns;        /* in those another process wanted too: GPU time used beyond the entitlement */
    int contested;           /* in the latest ms the peers published, one of them had work on the GPU */
    int shares;              /* ...and one of them, or this process, has a compute share */
    int saturated;           /* the GPU ran work nearly all its recent time (device_busy.h; before a period's sample,
                                or on a MIG instance, it counts as saturated) */
    int turns;               /* limited processes take turns: a period's sample came, and saturated since the busy part
                                was last under ALNAIR_DEVICE_TURNS_OFF (device_busy.h) */
    double entitled;         /* this process's part of the GPU then, were it to want it (0..1) */
    double unaccounted_ns;   /* busy time not accounted yet, at the latest part of it that was GPU time */
};

/* Monitor tick at now, after the table was read: final ms whose peers' timelines are in (or late
 * enough to be given up on) go into the totals, each divided among the processes busy in it. With
 * no table (NULL), or no peer in `peers` (a bit per slot), all of it is the process's. The GPU's
 * new busy samples (none where it gives none) scale it, and the tick's figures, to what the GPU ran. */
struct alnair_gpu_time_tick alnair_gpu_time_account(struct alnair_gpu_time *g, uint64_t now_ns,
                                                    const struct alnair_share_table *table, uint64_t peers,
                                                    const struct alnair_busy_sample *samples, int n_samples);

/* The limits' debts on that GPU time (compute_limit.c explains them). */
struct alnair_gpu_debts {
    double cap_ns;   /* GPU time used beyond the cap's part of the time passed (negative: a credit) */
    double share_ns; /* GPU time used beyond the entitlement while others wanted the GPU */
};

/* After a tick's accounting: how long launches wait from now (ns; 0: nothing is owed), for a cap of
 * cap_percent (0: none) and the share the tick's entitlement is based on. */
double alnair_gpu_time_owed(struct alnair_gpu_debts *debts, uint32_t cap_percent, const struct alnair_gpu_time_tick *t);

#endif
