/*
 * monitor.c - the monitoring thread: every period it measures GPU time and decides
 * the compute limits' waits, and publishes the process's cuda record into its segment.
 *
 * It starts when the process first uses a device, so programs that load the
 * library but never touch CUDA get no thread and no segment.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "intercept.h"
#include "shm_segment.h"

static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
/* The monitor thread and the exit's final publish: one publisher at a time, as the seqlock needs. */
static pthread_mutex_t publish_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int started;
static _Atomic int exiting; /* the driver may be torn down already: never call it */
static struct alnair_segment segment = {.fd = -1};
static CUuuid uuids[ALNAIR_CUDA_MAX_DEVICES];
static int uuid_known[ALNAIR_CUDA_MAX_DEVICES];
/* Launches are not timed (a clock read each would double a launch's cost): a publish that finds the count
 * moved since the last one stamps its own time. Only publish() touches these, under publish_lock. */
static uint64_t launches_seen;
static uint64_t last_launch_time_ns;

/* The device's UUID, asked of the driver once (the ticks below are given them: they never call back here). */
static const uint8_t *device_uuid(int ordinal)
{
    if (!uuid_known[ordinal] && !atomic_load_explicit(&exiting, memory_order_relaxed)) {
        cuDeviceGetUuid_v2_fn get_uuid = REAL(cuDeviceGetUuid_v2);
        uuid_known[ordinal] = get_uuid && get_uuid(&uuids[ordinal], ordinal) == CUDA_SUCCESS;
    }
    return uuid_known[ordinal] ? (const uint8_t *)uuids[ordinal].bytes : NULL;
}

static void copy_device(struct alnair_cuda_device *out, int ordinal, uint64_t kernel_launches)
{
    struct alnair_device *d = &alnair.devices[ordinal];
    const uint8_t *uuid = device_uuid(ordinal);
    out->device_index = (uint32_t)ordinal;
    if (uuid) memcpy(out->uuid, uuid, sizeof out->uuid);
    out->kernel_launches = kernel_launches;
    out->graph_launches = atomic_load_explicit(&d->graph_launches, memory_order_relaxed);
    out->bytes_in_use = atomic_load_explicit(&d->bytes_in_use, memory_order_relaxed);
    out->peak_bytes = atomic_load_explicit(&d->peak_bytes, memory_order_relaxed);
    out->allocations = atomic_load_explicit(&d->allocations, memory_order_relaxed);
    out->failed_allocations = atomic_load_explicit(&d->failed_allocations, memory_order_relaxed);
    out->limit_denied_allocations = atomic_load_explicit(&d->limit_denied_allocations, memory_order_relaxed);
    out->memory_limit_bytes = d->memory_limit_bytes;
    out->compute_limit_percent = d->compute_limit_percent;
    out->compute_share_percent = d->compute_share_percent;
    out->compute_quota_ns = out->compute_period_ns = 0; /* the turns' windows: gone (docs/shm-abi.md) */
    out->throttled_ns = atomic_load_explicit(&d->throttled_ns, memory_order_relaxed);
    out->gpu_time_ns = atomic_load_explicit(&d->gpu_time.gpu_time_ns, memory_order_relaxed);
    out->flags |= ALNAIR_CUDA_DEVICE_GPU_TIME;
}

static void copy_device_ext(struct alnair_cuda_device_ext *out, int ordinal)
{
    const struct alnair_device *d = &alnair.devices[ordinal];
    for (int k = 0; k < ALNAIR_COPY_DIRECTIONS; k++) {
        out->copies[k].copies = atomic_load_explicit(&d->copies[k].copies, memory_order_relaxed);
        out->copies[k].bytes = atomic_load_explicit(&d->copies[k].bytes, memory_order_relaxed);
        out->copies[k].sync_ns = atomic_load_explicit(&d->copies[k].sync_ns, memory_order_relaxed);
    }
    out->busy_ns = atomic_load_explicit(&d->gpu_time.busy_ns, memory_order_relaxed);
}

static void copy_device_memory(struct alnair_cuda_device_memory *out, int ordinal)
{
    struct alnair_device *d = &alnair.devices[ordinal];
    out->context_bytes = alnair_context_memory(d);
    out->pool_reserved_bytes = atomic_load_explicit(&d->pool_reserved_bytes, memory_order_relaxed);
    out->pool_used_bytes = atomic_load_explicit(&d->pool_used_bytes, memory_order_relaxed);
    out->charged_bytes = atomic_load_explicit(&d->bytes_in_use, memory_order_relaxed) + alnair_memory_overhead(d);
    out->context_growth_bytes = atomic_load_explicit(&d->context_growth_bytes, memory_order_relaxed);
    out->flags = alnair.limit_includes_context ? ALNAIR_CUDA_LIMIT_INCLUDES_CONTEXT : 0;
}

/* From the process start to an event's CLOCK_BOOTTIME; 0 (not yet) stays 0. The start is known to a
 * clock tick, so an event within the first tick still reads as 1 ns, not as "not yet". */
static uint64_t since_start(uint64_t boottime_ns)
{
    uint64_t start_ns = segment.header->start_time_ticks * (1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK));
    if (!boottime_ns) return 0;
    return boottime_ns > start_ns ? boottime_ns - start_ns : 1;
}

static void copy_activity(struct alnair_cuda_activity *out, uint64_t launches)
{
    if (launches != launches_seen) {
        launches_seen = launches;
        last_launch_time_ns = alnair_realtime_ns();
    }
    out->first_launch_ns = since_start(atomic_load_explicit(&alnair.first_launch_boottime_ns, memory_order_relaxed));
    out->first_allocation_ns =
        since_start(atomic_load_explicit(&alnair.first_allocation_boottime_ns, memory_order_relaxed));
    out->last_launch_time_ns = last_launch_time_ns;
}

static void publish(void)
{
    pthread_mutex_lock(&publish_lock);
    struct alnair_cuda_record *record = segment.record;
    alnair_segment_publish_begin(&segment);
    uint32_t count = 0;
    uint64_t launches = 0;
    int ordinals[ALNAIR_CUDA_MAX_DEVICES];
    uint64_t kernel_launches[ALNAIR_CUDA_MAX_DEVICES];
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++)
        if (atomic_load_explicit(&alnair.devices[i].seen, memory_order_relaxed)) ordinals[count++] = i;
    /* The kernel table's pass gives each device's launches too: the rows and the count agree in every record. */
    alnair_kernel_names_publish(&record->kernels, ordinals, (int)count,
                                atomic_load_explicit(&exiting, memory_order_relaxed), kernel_launches);
    for (uint32_t k = 0; k < count; k++) {
        copy_device(&record->devices[k], ordinals[k], kernel_launches[k]);
        copy_device_ext(&record->devices_ext[k], ordinals[k]);
        copy_device_memory(&record->devices_memory[k], ordinals[k]);
        launches += record->devices[k].kernel_launches + record->devices[k].graph_launches;
    }
    record->device_count = count;
    record->max_devices = ALNAIR_CUDA_MAX_DEVICES;
    copy_activity(&record->activity, launches);
    alnair_segment_publish_end(&segment);
    pthread_mutex_unlock(&publish_lock);
}

static void *monitor_main(void *arg)
{
    pthread_setname_np(pthread_self(), "alnair-monitor"); /* what top -H, gdb and py-spy show */
    int have_segment = arg != NULL;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (;;) {
        uint64_t now = alnair_monotonic_ns();
        const uint8_t *uuids[ALNAIR_CUDA_MAX_DEVICES];
        for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++)
            uuids[i] = atomic_load_explicit(&alnair.devices[i].seen, memory_order_relaxed) ? device_uuid(i) : NULL;
        alnair_compute_limit_tick(now, uuids);
        if (!atomic_load_explicit(&exiting, memory_order_relaxed)) alnair_pools_tick();
        alnair_held_memory_tick(uuids);
        if (have_segment) publish();
        next.tv_nsec += (long)alnair.period_ms * 1000000L;
        while (next.tv_nsec >= 1000000000L) next.tv_nsec -= 1000000000L, next.tv_sec++;
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) != 0) {
        }
    }
    return NULL;
}

static void start_monitor(void)
{
    if (atomic_load_explicit(&started, memory_order_acquire)) return;
    pthread_mutex_lock(&start_lock);
    if (!atomic_load(&started)) {
        /* Made here, once, so a failure is reported before the program goes on. */
        char err[512];
        int have_segment = alnair_segment_create(&segment, ALNAIR_KIND_CUDA, sizeof(struct alnair_cuda_record), err,
                                                 sizeof err) == 0;
        if (!have_segment) alnair_log("%s (counters are not published; the program runs on)", err);
        /* The program's signal handlers must never run on our thread. */
        sigset_t all, saved;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &saved);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_t thread;
        if (pthread_create(&thread, &attr, monitor_main, have_segment ? &segment : NULL) != 0)
            alnair_log("alnair: cannot start the monitoring thread; counters are not published");
        pthread_attr_destroy(&attr);
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
        atomic_store_explicit(&started, 1, memory_order_release);
    }
    pthread_mutex_unlock(&start_lock);
}

/* The child has no monitor thread and must not write the parent's segment. */
static void fork_child(void)
{
    alnair_segment_forget(&segment);
    memset(uuid_known, 0, sizeof uuid_known);
    launches_seen = last_launch_time_ns = 0;
    pthread_mutex_init(&start_lock, NULL);
    pthread_mutex_init(&publish_lock, NULL);
    atomic_store(&started, 0);
}
ALNAIR_ON_FORK(monitor_fork, NULL, NULL, fork_child);

/* It starts when the process first uses a device: state.c calls what is registered here. */
__attribute__((constructor)) static void start_on_first_device(void) { alnair_on_first_device(start_monitor); }

/* A clean exit publishes the final counters (work done since the last tick would be lost otherwise), then
 * leaves the segment to a reader that serves exited writers' records, or removes it; a crash leaves the
 * last tick's record for the exporter to serve and reclaim. */
__attribute__((destructor)) static void retire_segment(void)
{
    if (segment.fd < 0 || !atomic_load(&started)) return;
    atomic_store(&exiting, 1);
    publish();
    alnair_segment_retire(&segment);
}
