/*
 * compute_limit.c - the cap and the share of each GPU per process, both on measured GPU time.
 *
 * Every process using a GPU joins the GPU's share table (gpu_share.c) and measures its GPU time
 * there (gpu_time.c): its busy time, each ms divided among the processes busy in it, scaled to the
 * GPU's own busy time from NVML's samples, which the tick takes from the NVML thread (nvml_reader.c). The two
 * limits are debts on that time, kept by the monitor thread every tick; while a debt is owed,
 * launches wait (the only place the library sleeps), and the GPU runs the others' work:
 *
 *   cap (ALNAIR_COMPUTE_LIMIT=N): never more than N% of the GPU's time. The debt grows by the
 *     GPU time used, and by what the GPU idles of the process's turns while a peer holds for it
 *     (that time was the process's, used or not), and shrinks by N% of the time passing; launches
 *     wait while it is owed, for as long as N% of the time takes to pay it. A small credit
 *     (CAP_CREDIT_NS of the cap's time) lets a step start whole after an idle spell, so no step
 *     waits for a fixed window and steps of any length average to the cap.
 *   share (ALNAIR_COMPUTE_SHARE=N): at least N% while others want the GPU, and whatever is idle
 *     otherwise. In every ms that another process wanted too, each wanting process is entitled to
 *     its weight's part of the GPU time the GPU delivered (gpu_time.h); the debt is what it used
 *     beyond that. Debts of one GPU sum to nothing: what one pays back, the others may use. Only while
 *     the GPU is saturated (NVML's samples, averaged over the last ~second: busy >= 90%): below, no
 *     process's work waited for the GPU, so nothing is owed, and holding one back would idle it more.
 *     Launches wait while the debt is owed and another process wants the GPU now, so a share
 *     never holds the GPU idle. Shares hold only where a process has one: processes without,
 *     among themselves, run as the GPU time-slices them.
 *
 * The debts lag the GPU by the accounting's wait for the peers' timelines (up to 30 ms), so the
 * busy time not accounted yet counts at its latest GPU-time part. A launch that waited starts
 * with its queue empty, which is what a wait exists for.
 *
 * While the GPU is saturated (and until it is under 85% busy, device_busy.h), a process released from a wait
 * takes a turn (turns.h): the others' launches hold, drained, while it runs alone, so the GPU does not switch
 * between them every slice.
 */
#define _GNU_SOURCE
#include <string.h>
#include <time.h>

#include "gpu_share.h"
#include "intercept.h"
#include "nvml_reader.h"

#define LOOK_FOR_TABLE_NS 100000000ull /* a process that could not join tries again this often */
#define IDLE_NS 1000000000ull       /* an unlimited process that launched nothing for this long asks for nothing */
#define MAX_SLEEP_NS 5000000ull     /* a waiting launch reads the monitor's decision this often */
#define PPM 1000000.0
#define MAX_SAMPLES 64

struct controller {
    int started;
    struct alnair_share share; /* fd -1: not in a share table, GPU time counted alone */
    uint64_t looked_ns;        /* the last try to join the table */
    uint64_t launches_seen, launched_ns; /* without a limit: the launch count, and when it last moved */
    uint64_t launches_ticked;  /* the launch count at the last tick */
    struct alnair_gpu_debts debts;
    struct alnair_turn turn;   /* the launches' and the monitor's */
};
static struct controller controllers[ALNAIR_CUDA_MAX_DEVICES];
static _Atomic int leaving; /* the process is exiting: its slot is handed back */

/* ---- the launch gate (any thread) ------------------------------------------------ */

/* Before a launch waits, its stream's queue drains and the busy span ends: a wait is for an empty queue,
 * and a span left open would count the wait as busy. Not while the stream captures a graph (nothing runs
 * then, and a sync would end the capture) or where the driver cannot say. */
static void drain(struct alnair_device *d, CUstream stream, int per_thread)
{
    CUstreamCaptureStatus capturing = 1;
    cuStreamIsCapturing_fn is_capturing = per_thread ? REAL(cuStreamIsCapturing_ptsz) : REAL(cuStreamIsCapturing);
    if (!alnair_gpu_time_busy(&d->gpu_time) || !is_capturing || is_capturing(stream, &capturing) != CUDA_SUCCESS ||
        capturing)
        return;
    CUresult r = per_thread ? CALL_REAL(cuStreamSynchronize_ptsz, (stream)) : CALL_REAL(cuStreamSynchronize, (stream));
    if (r == CUDA_SUCCESS) alnair_gpu_time_end(&d->gpu_time, alnair_monotonic_ns());
}

static void pause_for(uint64_t ns)
{
    struct timespec pause = {0, (long)ns};
    nanosleep(&pause, NULL);
}

/* The GPU time follows the turn's state: the cap charges what the GPU idles of a turn while the peers hold, from
 * when its launches go (not while its first one waits for the peers to hold: a handover is nobody's). */
static void note_turn(struct alnair_device *d, struct controller *c, uint64_t now)
{
    int running = atomic_load(&c->turn.state) == ALNAIR_TURN_TAKEN && !atomic_load(&d->gpu_time.gate_waiting);
    alnair_gpu_time_turn(&d->gpu_time, running, now);
}

/* The turns' gate: holds while a peer's turn makes this launch hold, or its own turn waits for its busy peers to
 * hold; the table read again every ALNAIR_TURN_POLL_NS. Returns the time. */
static uint64_t wait_for_turns(struct alnair_device *d, struct controller *c, CUstream stream, int per_thread, uint64_t now)
{
    struct alnair_share_table table;
    struct alnair_turn_wait w = {now, 0, 0};
    int changed;
    if (!alnair_turn_at_gate(&c->turn, now)) return now;
    while (alnair_share_peek(&c->share, &table) == 0) {
        int wait = alnair_turn_gate(&c->turn, &table, now, &w, &changed);
        if (changed) alnair_share_write_turn(&c->share, &c->turn);
        if (!wait) break;
        if (!w.drained) { /* a hold is for an empty queue, as a wait for the limit is */
            drain(d, stream, per_thread);
            w.drained = 1;
            continue;
        }
        atomic_store_explicit(&d->gpu_time.gate_waited, 1, memory_order_relaxed);
        pause_for(ALNAIR_TURN_POLL_NS);
        now = alnair_monotonic_ns();
    }
    if (alnair_turn_released(&c->turn, &w, now)) alnair_share_write_turn(&c->share, &c->turn);
    return now;
}

void alnair_wait_while_owed(struct alnair_device *d, CUstream stream, int per_thread)
{
    struct controller *c = &controllers[d - alnair.devices];
    uint64_t now = alnair_monotonic_ns(), start = now, until;
    atomic_fetch_add(&d->gpu_time.gate_waiting, 1);
    if (atomic_load_explicit(&d->barred_until_ns, memory_order_relaxed) > now) {
        drain(d, stream, per_thread);
        if (alnair_turn_end(&c->turn, atomic_load(&d->barred_until_ns))) alnair_share_write_turn(&c->share, &c->turn);
        note_turn(d, c, alnair_monotonic_ns());
    }
    while ((until = atomic_load_explicit(&d->barred_until_ns, memory_order_relaxed)) > now) {
        atomic_store_explicit(&d->gpu_time.gate_waited, 1, memory_order_relaxed);
        pause_for(until - now < MAX_SLEEP_NS ? until - now : MAX_SLEEP_NS);
        now = alnair_monotonic_ns();
    }
    now = wait_for_turns(d, c, stream, per_thread, now);
    atomic_fetch_sub(&d->gpu_time.gate_waiting, 1);
    note_turn(d, c, now);
    if (now != start) atomic_fetch_add_explicit(&d->throttled_ns, now - start, memory_order_relaxed);
}

/* ---- the per-device controller (monitor thread only) ------------------------------ */

/* Every process joins the GPU's table, making it if there is none. A limited process
 * says if it cannot; every process tries again every LOOK_FOR_TABLE_NS, silently. */
static void join(struct controller *c, struct alnair_device *d, const uint8_t *uuid, uint64_t now)
{
    char err[512];
    int limited = d->compute_limit_percent || d->compute_share_percent;
    c->looked_ns = now;
    if (uuid && alnair_share_join(&c->share, uuid, 1, err, sizeof err) == 0) return;
    c->share.fd = -1;
    if (uuid && limited && !c->started) alnair_log("%s (the limit holds on this process's own GPU time)", err);
}

/* The quota in the slot, for older processes and people reading the table: the cap, or for a process
 * without one "unlimited" while it launches and nothing once idle. */
static uint32_t quota_ppm(struct controller *c, const struct alnair_device *d, uint64_t launches, uint64_t now)
{
    if (d->compute_limit_percent) return (uint32_t)(d->compute_limit_percent * PPM / 100);
    if (launches != c->launches_seen || atomic_load(&d->gpu_time.gate_waiting))
        c->launches_seen = launches, c->launched_ns = now;
    return now - c->launched_ns < IDLE_NS ? ALNAIR_SHARE_UNLIMITED : 0;
}

/* This process's turn after the tick's decision, and the peers' as the table says; the word written if it changed. */
static void decide_turns(struct controller *c, struct alnair_device *d, int worked, uint64_t now, uint64_t until,
                         int shared, int turns)
{
    /* not in a table: no turns, so no launch touches the share while a failed join is tried again (it remakes it) */
    if (alnair_turn_tick(&c->turn, now, until, worked, shared && turns, shared ? &c->share.table : NULL,
                         shared ? c->share.counted : 0) && shared)
        alnair_share_write_turn(&c->share, &c->turn);
    note_turn(d, c, now);
}

static void tick_device(struct controller *c, int ordinal, const uint8_t *uuid, uint64_t now)
{
    struct alnair_device *d = &alnair.devices[ordinal];
    if (!c->started || (c->share.fd < 0 && now - c->looked_ns >= LOOK_FOR_TABLE_NS)) join(c, d, uuid, now);
    c->started = 1;
    int shared = c->share.fd >= 0 && !atomic_load(&leaving);
    uint64_t launches = alnair_kernel_launches(&d->kernels) + atomic_load_explicit(&d->graph_launches, memory_order_relaxed);
    d->gpu_time.share_ppm = (uint32_t)(d->compute_share_percent * PPM / 100);
    /* this process's timeline goes out with its slot; then the table is read for the peers' */
    alnair_gpu_time_close(&d->gpu_time, now, launches, shared ? &c->share.busy : NULL);
    if (shared) {
        alnair_share_set_quota(&c->share, quota_ppm(c, d, launches, now), &c->turn);
        alnair_share_read(&c->share, now);
    }
    int worked = launches != c->launches_ticked || alnair_gpu_time_busy(&d->gpu_time) ||
                 atomic_load(&d->gpu_time.gate_waiting) > 0;
    c->launches_ticked = launches;
    struct alnair_busy_sample samples[MAX_SAMPLES];
    int n = alnair_nvml_busy_taken(ordinal, uuid, samples, MAX_SAMPLES, worked); /* none without NVML, or on MIG */
    struct alnair_gpu_time_tick t =
        alnair_gpu_time_account(&d->gpu_time, now, shared ? &c->share.table : NULL, c->share.counted, samples, n);
    double wait = alnair_gpu_time_owed(&c->debts, d->compute_limit_percent, &t);
    uint64_t until = wait > 0 ? now + (uint64_t)wait : 0;
    decide_turns(c, d, worked, now, until, shared, t.turns);
    /* launches look at the gate while a wait is owed, and while turns are due or held for (1: a time long past) */
    if (!until && alnair_turn_pending(&c->turn)) until = 1;
    atomic_store_explicit(&d->barred_until_ns, until, memory_order_relaxed);
}

void alnair_compute_limit_tick(uint64_t now, const uint8_t *const uuids[ALNAIR_CUDA_MAX_DEVICES])
{
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++)
        if (atomic_load_explicit(&alnair.devices[i].seen, memory_order_relaxed))
            tick_device(&controllers[i], i, uuids[i], now);
}

/* A fork child takes its own slot and starts with no debt. */
static void fork_child(void)
{
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++)
        if (controllers[i].started) alnair_share_forget(&controllers[i].share);
    memset(controllers, 0, sizeof controllers);
}
ALNAIR_ON_FORK(compute_limit_fork, NULL, NULL, fork_child);

/* A clean exit hands the slot back at once; after a crash the others notice the slot's lock is gone
 * within a second. */
__attribute__((destructor)) static void leave_share_tables(void)
{
    atomic_store(&leaving, 1);
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++)
        if (controllers[i].started) alnair_share_leave(&controllers[i].share);
}
