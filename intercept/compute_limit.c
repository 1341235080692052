/*
 * compute_limit.c - a share of each GPU per process, enforced in time.
 *
 * Without MPS a GPU time-slices between processes: when two have work queued,
 * each one's kernels wait for the other's slices, so throttling each process on
 * its own (a launch rate, a token bucket) cannot give a 30% process 30% of the
 * work: the waits stretch its kernels, its measured utilization overstates what
 * it got, and feedback on that starves it (measured on the H200: 8% of the
 * throughput at "35%" utilization). So limited processes on one GPU take turns.
 * Each period (ALNAIR_SHARE_PERIOD_NS) holds one window per process, laid out
 * from the GPU's share table (gpu_share.c); a launch outside the process's own
 * window waits for it. A window is the process's time tokens for the period.
 *
 * Processes without a limit take turns too, once a limited process shares their
 * GPU: they split what the limited ones leave (gpu_share.c), so a limited process
 * is never "alone" while others run; with no limited process there, none waits.
 * Every process joins its GPU's table, limited or not: each tick it publishes its
 * busy timeline there and reads the others', which gives its GPU time (gpu_time.c).
 *
 * A window bounds when work is launched, not when it runs, so a launch also waits
 * when the work queued before it would not end inside the window: the queue is
 * estimated from the launches since the last sync and the GPU time per launch
 * the syncs showed (a fluid model: queued_until_ns). What still runs
 * outside the window (the calls that wait for the GPU show how long the work
 * ran) is owed, and given back by barring launches from the start of the
 * process's next windows.
 *
 * Feedback: the window starts at the limit. While the process is alone on the
 * GPU (no peer in the table and no other process busy in NVML's samples), the
 * monitor thread measures its SM utilization with NVML (loaded lazily, only with
 * a limit set) and every FEEDBACK_NS scales the quota by sqrt(limit / measured),
 * clamped to [0.8, 1.25] a step and [0.5, 1.5] x the limit overall. Under its
 * limit, the quota grows only if the process waited for its window (otherwise it
 * is idle by choice: no wind-up). With other processes taking turns NVML
 * misattributes time (docs/intercept.md), so a peer's arrival undoes every step.
 */
#define _GNU_SOURCE
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_share.h"
#include "intercept.h"
#include "nvml.h"

#define FEEDBACK_NS 500000000ull /* NVML samples about every 1/6 s: average several */
#define MAX_SLEEP_NS 20000000ull /* a waiting launch re-reads its window this often */
#define WAITED_NS 50000ull       /* a wait shorter than this found the work done */
#define LOOK_FOR_TABLE_NS ALNAIR_SHARE_PERIOD_NS /* an unlimited process takes turns within a period of a limited one: a failed open() 10 times a second */
#define IDLE_NS 1000000000ull /* an unlimited process that launched nothing for this long takes no turns */
#define COST_WEIGHT 4            /* the launch cost follows the latest sync's by 1/4 */
#define PPM 1000000.0

/* ---- the launch gate and the overrun (any thread) ---------------------------- */

#define PERIOD ALNAIR_SHARE_PERIOD_NS
#define LAID_OUT (1ull << 63)

static uint64_t pack_window(uint64_t offset_ns, uint64_t length_ns)
{
    return LAID_OUT | (offset_ns / 1000) << 32 | (length_ns / 1000);
}

/* The window launches may use: offset and length (ns) within the period. */
static void window_of(struct alnair_device *d, uint64_t *offset, uint64_t *length)
{
    uint64_t window = atomic_load_explicit(&d->window, memory_order_relaxed);
    if (!window) /* before the monitor lays the GPU out: alone, from the start of the period */
        window = pack_window(0, PERIOD * d->compute_limit_percent / 100);
    *offset = (window >> 32 & 0x7fffffffu) * 1000;
    *length = (window & 0xffffffffu) * 1000;
}

/* Window time in [0, t) when windows start at every multiple of the period. */
static uint64_t window_time_before(uint64_t t, uint64_t length)
{
    uint64_t partial = t % PERIOD;
    return t / PERIOD * length + (partial < length ? partial : length);
}

/* Window time in [a, b). */
static uint64_t window_time(uint64_t a, uint64_t b, uint64_t offset, uint64_t length)
{
    uint64_t shift = PERIOD - offset;
    return window_time_before(b + shift, length) - window_time_before(a + shift, length);
}

/* A sync at now ends the batch of `launches` since the last one, which ran in the window's
 * time since its first launch (outside it, other processes ran). A sync that waited measures
 * the cost; one that found the work done bounds it, so it may only lower it (else a launch-bound
 * process, whose syncs seldom wait, keeps what one slow sync taught it). */
static void learn_launch_cost(struct alnair_device *d, uint64_t launches, uint64_t now, int waited)
{
    uint64_t start = atomic_load_explicit(&d->batch_start_ns, memory_order_relaxed);
    uint64_t old = atomic_load_explicit(&d->launch_cost_ns, memory_order_relaxed);
    if (!launches || start >= now || (!waited && !old)) return;
    uint64_t offset, length;
    window_of(d, &offset, &length);
    uint64_t cost = window_time(start, now, offset, length) / launches;
    if (!waited && cost >= old) return;
    atomic_store_explicit(&d->launch_cost_ns, old ? old + ((int64_t)cost - (int64_t)old) / COST_WEIGHT : cost,
                          memory_order_relaxed);
}

void alnair_charge_overrun(struct alnair_device *d, uint64_t start, uint64_t now)
{
    if (now - start < WAITED_NS) return; /* it hardly waited: the work was done */
    uint64_t from, charged = atomic_load(&d->charged_until_ns);
    do { /* threads waiting at once count the time once */
        if (charged >= now) return;
        from = charged > start ? charged : start;
    } while (!atomic_compare_exchange_weak(&d->charged_until_ns, &charged, now));
    uint64_t offset, length;
    window_of(d, &offset, &length);
    uint64_t outside = (now - from) - window_time(from, now, offset, length);
    if (outside) atomic_fetch_add_explicit(&d->overrun_ns, outside, memory_order_relaxed);
}

void alnair_synced(struct alnair_device *d, uint64_t start, uint64_t now)
{
    uint64_t launches = atomic_exchange(&d->batch_launches, 0);
    atomic_store_explicit(&d->queued_until_ns, now, memory_order_relaxed); /* the queue is empty */
    int waited = now - start >= WAITED_NS; /* else the work was done before */
    learn_launch_cost(d, launches, now, waited);
    if (waited) alnair_charge_overrun(d, start, now);
}

/* Inside the window with `left` ns of it to run: if time is owed, bar launches for
 * that long (at most the rest of the window). Returns 0 when nothing is owed. */
static int give_back(struct alnair_device *d, uint64_t now, uint64_t left)
{
    uint64_t owed = atomic_load(&d->overrun_ns);
    while (owed) {
        uint64_t pay = owed < left ? owed : left;
        if (atomic_compare_exchange_weak(&d->overrun_ns, &owed, owed - pay)) {
            atomic_store(&d->barred_until_ns, now + pay);
            return 1;
        }
    }
    return 0;
}

/* The queued work and this launch would run past the window's end, `left` ns away.
 * An empty queue always lets one launch go: a launch longer than the window waits
 * for nothing but its window's start. */
static int would_overrun(struct alnair_device *d, uint64_t now, uint64_t left)
{
    uint64_t queued = atomic_load_explicit(&d->queued_until_ns, memory_order_relaxed);
    return queued > now && queued - now + atomic_load_explicit(&d->launch_cost_ns, memory_order_relaxed) > left;
}

/* ns the launch must wait from now: 0 to go. */
static uint64_t wait_ns(struct alnair_device *d, uint64_t now)
{
    uint64_t barred = atomic_load_explicit(&d->barred_until_ns, memory_order_relaxed);
    if (now < barred) return barred - now;
    uint64_t offset, length;
    window_of(d, &offset, &length);
    if (length >= PERIOD) return 0;
    uint64_t into = (now % PERIOD + PERIOD - offset) % PERIOD;
    if (into >= length || would_overrun(d, now, length - into)) return PERIOD - into;
    return give_back(d, now, length - into) ? wait_ns(d, now) : 0;
}

/* The launch goes at now: its work queues behind what is there. */
static void queue_launch(struct alnair_device *d, uint64_t now)
{
    if (atomic_fetch_add_explicit(&d->batch_launches, 1, memory_order_relaxed) == 0)
        atomic_store_explicit(&d->batch_start_ns, now, memory_order_relaxed);
    uint64_t queued = atomic_load_explicit(&d->queued_until_ns, memory_order_relaxed);
    /* racing launches may lose one another's cost: the estimate is approximate anyway */
    atomic_store_explicit(&d->queued_until_ns,
                          (queued > now ? queued : now) + atomic_load_explicit(&d->launch_cost_ns, memory_order_relaxed),
                          memory_order_relaxed);
}

uint64_t alnair_wait_for_window(struct alnair_device *d)
{
    uint64_t now = alnair_monotonic_ns(), start = now, wait;
    while ((wait = wait_ns(d, now)) != 0) {
        if (wait > MAX_SLEEP_NS) wait = MAX_SLEEP_NS; /* the layout may change meanwhile */
        struct timespec pause = {(time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull)};
        nanosleep(&pause, NULL);
        now = alnair_monotonic_ns();
    }
    if (now != start) {
        atomic_fetch_add_explicit(&d->throttled_ns, now - start, memory_order_relaxed);
        /* the wait was no work: the next sync learns from the launches after it (a new batch) */
        atomic_store_explicit(&d->batch_launches, 0, memory_order_relaxed);
    }
    queue_launch(d, now);
    return now;
}

/* ---- the per-device controller (monitor thread only) ----------------------- */

struct controller {
    int started;
    struct alnair_share share; /* fd -1: not in a share table, windows laid out alone */
    int peers;                 /* other processes in this GPU's table, at the last layout */
    double correction;         /* quota = limit x correction */
    uint64_t feedback_start_ns, throttled_at_start;
    uint64_t looked_ns;        /* the last try to join the table */
    uint64_t launches_seen, launched_ns; /* without a limit: the launch count, and when it last moved */
    unsigned long long nvml_last_seen;
};
static struct controller controllers[ALNAIR_CUDA_MAX_DEVICES];
static _Atomic int leaving; /* the process is exiting: its windows are handed back */

/* Average SM utilization of this process since the last call; -1 if NVML is
 * unavailable, reported no sample of this process in the window, or another
 * process (one without the intercept, not in the table) was busy in it. */
static double measured_utilization(struct controller *c, int ordinal, const uint8_t uuid[16])
{
    alnair_nvml_sample samples[256];
    unsigned int n = 256;
    if (alnair_nvml_utilization(alnair_nvml_device(ordinal, uuid), samples, &n, c->nvml_last_seen) != 0) return -1;
    double total = 0;
    unsigned int mine = 0, others_busy = 0;
    for (unsigned int i = 0; i < n; i++) {
        if (samples[i].timeStamp > c->nvml_last_seen) c->nvml_last_seen = samples[i].timeStamp;
        if (samples[i].pid == (unsigned int)getpid()) total += samples[i].smUtil, mine++;
        else if (samples[i].smUtil) others_busy++;
    }
    return mine && !others_busy ? total / mine : -1;
}

/* Every process joins the GPU's table, making it if there is none (the busy timelines
 * in it give each process its GPU time). A limited process says if it cannot; one
 * without a limit tries again every LOOK_FOR_TABLE_NS, silently. With no limited
 * process in the table nobody takes turns. */
static void join(struct controller *c, struct alnair_device *d, const uint8_t *uuid, uint64_t now)
{
    char err[512];
    int limited = d->compute_limit_percent != 0;
    c->looked_ns = now;
    if (uuid && alnair_share_join(&c->share, uuid, 1, err, sizeof err) == 0) return;
    c->share.fd = -1;
    if (uuid && limited) alnair_log("%s (the compute limit holds, but without taking turns with other processes)", err);
}

static void start(struct controller *c, struct alnair_device *d, const uint8_t *uuid, uint64_t now)
{
    c->started = 1;
    c->correction = 1.0;
    c->feedback_start_ns = now;
    c->throttled_at_start = atomic_load(&d->throttled_ns);
    join(c, d, uuid, now);
}

static void feedback(struct controller *c, struct alnair_device *d, int ordinal, const uint8_t *uuid, uint64_t now)
{
    uint64_t throttled = atomic_load(&d->throttled_ns);
    int held_back = throttled > c->throttled_at_start;
    /* NVML's per-process numbers are only trusted alone on the GPU: while processes
     * alternate it charges one's time to another (docs/intercept.md has the data). */
    double utilization = measured_utilization(c, ordinal, uuid);
    if (utilization > 0 && !c->peers) {
        double limit = d->compute_limit_percent;
        double step = fmin(fmax(sqrt(limit / utilization), 0.8), 1.25);
        if (utilization > limit || held_back) c->correction = fmin(fmax(c->correction * step, 0.5), 1.5);
    }
    c->feedback_start_ns = now;
    c->throttled_at_start = throttled;
}

/* This process's quota as the table holds it: its limit after feedback; without
 * a limit, none while it launches and 0 (not in the turns) once idle, so an idle
 * process takes no window from the others. */
static uint32_t quota_ppm(struct controller *c, const struct alnair_device *d, uint64_t now)
{
    if (d->compute_limit_percent) return (uint32_t)(fmin(d->compute_limit_percent / 100.0 * c->correction, 1.0) * PPM);
    uint64_t launches = atomic_load_explicit(&d->kernel_launches, memory_order_relaxed) +
                        atomic_load_explicit(&d->graph_launches, memory_order_relaxed);
    if (launches != c->launches_seen) c->launches_seen = launches, c->launched_ns = now;
    return now - c->launched_ns < IDLE_NS ? ALNAIR_SHARE_UNLIMITED : 0;
}

/* Shares the GPU now: the window from the table (without one, a limit's alone). */
static void take_window(struct controller *c, struct alnair_device *d, uint64_t now, uint64_t *offset,
                        uint64_t *length)
{
    uint32_t quota = quota_ppm(c, d, now);
    *offset = 0;
    *length = d->compute_limit_percent ? (uint64_t)((double)quota / PPM * PERIOD) : PERIOD;
    if (c->share.fd < 0 || atomic_load(&leaving)) return;
    alnair_share_set_quota(&c->share, quota);
    int alone = !c->peers;
    c->peers = alnair_share_window(&c->share, now, offset, length);
    if (!quota) *offset = 0, *length = PERIOD; /* idle: launches go at once, and make it take part */
    if (alone && c->peers && c->correction != 1.0) { /* a peer arrived: what NVML told alone no longer holds */
        c->correction = 1.0;
        take_window(c, d, now, offset, length);
    }
}

static void lay_out(struct controller *c, struct alnair_device *d, uint64_t now)
{
    uint64_t offset, length;
    take_window(c, d, now, &offset, &length);
    atomic_store_explicit(&d->window, pack_window(offset, length), memory_order_relaxed);
    d->compute_quota_ns = length;
    /* after the window: the first launch that waits reads the new one */
    if (!d->compute_limit_percent) atomic_store(&d->takes_turns, length < PERIOD);
}

void alnair_compute_limit_tick(uint64_t now, const uint8_t *const uuids[ALNAIR_CUDA_MAX_DEVICES])
{
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) {
        struct alnair_device *d = &alnair.devices[i];
        struct controller *c = &controllers[i];
        if (!atomic_load_explicit(&d->seen, memory_order_relaxed)) continue;
        const uint8_t *uuid = uuids[i];
        if (!c->started) start(c, d, uuid, now);
        else if (d->compute_limit_percent && now - c->feedback_start_ns >= FEEDBACK_NS) feedback(c, d, i, uuid, now);
        else if (!d->compute_limit_percent && c->share.fd < 0 && now - c->looked_ns >= LOOK_FOR_TABLE_NS)
            join(c, d, uuid, now);
        int shared = c->share.fd >= 0;
        uint64_t launches = atomic_load_explicit(&d->kernel_launches, memory_order_relaxed) +
                            atomic_load_explicit(&d->graph_launches, memory_order_relaxed);
        /* this process's busy timeline goes out with its slot; then the peers' are read with the table */
        alnair_gpu_time_close(&d->gpu_time, now, launches, shared ? &c->share.busy : NULL);
        lay_out(c, d, now);
        alnair_gpu_time_account(&d->gpu_time, now, shared ? &c->share.table : NULL, c->share.counted);
    }
}

/* A fork child takes its own turn: a new slot, fresh feedback. */
static void fork_child(void)
{
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++)
        if (controllers[i].started) alnair_share_forget(&controllers[i].share);
    memset(controllers, 0, sizeof controllers);
}
ALNAIR_ON_FORK(compute_limit_fork, NULL, NULL, fork_child);

/* A clean exit hands the windows back at once; after a crash the others notice
 * the slot's lock is gone within a second. */
__attribute__((destructor)) static void leave_share_tables(void)
{
    atomic_store(&leaving, 1);
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++)
        if (controllers[i].started) alnair_share_leave(&controllers[i].share);
}
