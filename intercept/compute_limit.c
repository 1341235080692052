/*
 * compute_limit.c - a share of each GPU per process, enforced with tokens.
 *
 * Every launch takes one token; when the bucket is empty the launching thread
 * waits (the only place the library sleeps, and only with a limit set). The
 * monitor thread refills the bucket every period at a rate it adapts:
 *
 *   1. ramp-up (first RAMP_NS of activity): no throttling; measure the launch rate
 *      the program reaches unthrottled, and its GPU utilization if NVML can see it;
 *   2. start at rate = launch rate x limit / utilization (utilization taken as
 *      100% when NVML cannot see this process, e.g. in another pid namespace);
 *   3. every FEEDBACK_NS, scale by sqrt(limit / measured utilization), clamped to
 *      [0.7, 1.4]: damped multiplicative feedback that converges without
 *      oscillating on NVML's coarse samples. Over its share, the rate is first
 *      brought down to what the process really launched (a rate above that does
 *      not bind); under its share, the rate grows only if we held the process
 *      back, since otherwise it is below its share by its own choice (no wind-up).
 *
 * NVML (libnvidia-ml.so.1) is loaded lazily on the monitor thread, only when a
 * compute limit is set; nvmlDeviceGetProcessUtilization gives this pid's SM use.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "intercept.h"

#define WAIT_NS 200000ull         /* a waiting launch re-checks the bucket this often */
#define RAMP_NS 500000000ull      /* unthrottled measurement at start */
#define FEEDBACK_NS 500000000ull  /* NVML samples about every 1/6 s: average several */
#define BURST_SECONDS 0.05        /* bucket capacity: 50 ms worth of launches */

void alnair_take_token_slow(struct alnair_device *d)
{
    int64_t tokens = atomic_load_explicit(&d->tokens, memory_order_relaxed);
    while (tokens > 0)
        if (atomic_compare_exchange_weak(&d->tokens, &tokens, tokens - 1)) return;
    uint64_t start = alnair_monotonic_ns();
    const struct timespec pause = {0, (long)WAIT_NS};
    for (;;) {
        nanosleep(&pause, NULL);
        tokens = atomic_load_explicit(&d->tokens, memory_order_relaxed);
        while (tokens > 0) {
            if (atomic_compare_exchange_weak(&d->tokens, &tokens, tokens - 1)) {
                atomic_fetch_add_explicit(&d->throttled_ns, alnair_monotonic_ns() - start, memory_order_relaxed);
                return;
            }
        }
    }
}

/* ---- NVML, the little of it we need --------------------------------------- */

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvml_process_sample;

struct nvml {
    int tried, ok;
    int (*init)(void);
    int (*handle_by_uuid)(const char *, void **);
    int (*process_utilization)(void *, nvml_process_sample *, unsigned int *, unsigned long long);
};
static struct nvml nvml;

static void load_nvml(void)
{
    nvml.tried = 1;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!lib) return;
    *(void **)&nvml.init = dlsym(lib, "nvmlInit_v2");
    *(void **)&nvml.handle_by_uuid = dlsym(lib, "nvmlDeviceGetHandleByUUID");
    *(void **)&nvml.process_utilization = dlsym(lib, "nvmlDeviceGetProcessUtilization");
    nvml.ok = nvml.init && nvml.handle_by_uuid && nvml.process_utilization && nvml.init() == 0;
}

/* ---- the per-device controller (monitor thread only) ----------------------- */

struct controller {
    int phase; /* 0 idle, 1 ramp-up, 2 controlled */
    double rate; /* tokens per second */
    double credit;
    uint64_t phase_start_ns, last_tick_ns;
    uint64_t launches_at_start, throttled_at_start;
    void *nvml_device;
    unsigned long long nvml_last_seen;
};
static struct controller controllers[ALNAIR_CUDA_MAX_DEVICES];

static uint64_t launches(struct alnair_device *d)
{
    return atomic_load(&d->kernel_launches) + atomic_load(&d->graph_launches);
}

/* Average SM utilization of this process since the last call; -1 if NVML is
 * unavailable or reported no sample of this process in the window. */
static double measured_utilization(struct controller *c, int ordinal)
{
    if (!nvml.tried) load_nvml();
    if (!nvml.ok) return -1;
    if (!c->nvml_device) {
        CUuuid uuid;
        cuDeviceGetUuid_v2_fn get_uuid = REAL(cuDeviceGetUuid_v2);
        if (!get_uuid || get_uuid(&uuid, ordinal) != CUDA_SUCCESS) return -1;
        const unsigned char *u = (const unsigned char *)uuid.bytes;
        char text[64];
        snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
        if (nvml.handle_by_uuid(text, &c->nvml_device) != 0) return -1;
    }
    nvml_process_sample samples[256];
    unsigned int n = 256;
    if (nvml.process_utilization(c->nvml_device, samples, &n, c->nvml_last_seen) != 0) return -1;
    double total = 0;
    unsigned int mine = 0;
    for (unsigned int i = 0; i < n; i++) {
        if (samples[i].timeStamp > c->nvml_last_seen) c->nvml_last_seen = samples[i].timeStamp;
        if (samples[i].pid == (unsigned int)getpid()) total += samples[i].smUtil, mine++;
    }
    return mine ? total / mine : -1;
}

static void start_ramp(struct controller *c, struct alnair_device *d, uint64_t now)
{
    c->phase = 1;
    c->phase_start_ns = now;
    c->launches_at_start = launches(d);
    atomic_store(&d->tokens, INT64_MAX / 2); /* unthrottled while measuring */
}

static void finish_ramp(struct controller *c, struct alnair_device *d, int ordinal, uint64_t now)
{
    double seconds = (double)(now - c->phase_start_ns) / 1e9;
    double launch_rate = (double)(launches(d) - c->launches_at_start) / seconds;
    double utilization = measured_utilization(c, ordinal);
    if (utilization <= 0) utilization = 100;
    c->rate = fmax(launch_rate * d->compute_limit_percent / utilization, 1.0);
    c->phase = 2;
    c->phase_start_ns = now;
    c->launches_at_start = launches(d);
    c->throttled_at_start = atomic_load(&d->throttled_ns);
    atomic_store(&d->tokens, 0);
}

static void feedback(struct controller *c, struct alnair_device *d, int ordinal, uint64_t now)
{
    double seconds = (double)(now - c->phase_start_ns) / 1e9;
    double launched = (double)(launches(d) - c->launches_at_start) / seconds;
    uint64_t throttled = atomic_load(&d->throttled_ns);
    int held_back = throttled > c->throttled_at_start;
    double utilization = measured_utilization(c, ordinal);
    if (utilization < 0 && nvml.ok && held_back) utilization = 1; /* NVML saw no kernel of ours: starved */
    if (utilization > 0) {
        double limit = d->compute_limit_percent;
        double scale = fmin(fmax(sqrt(limit / utilization), 0.7), 1.4);
        if (utilization > limit) /* over its share: bind to what it really launched, then cut */
            c->rate = fmax(fmin(c->rate, launched) * scale, 1.0);
        else if (held_back) /* under it because we held it back */
            c->rate *= scale;
    }
    c->phase_start_ns = now;
    c->launches_at_start = launches(d);
    c->throttled_at_start = throttled;
}

static void refill(struct controller *c, struct alnair_device *d, uint64_t now)
{
    c->credit += c->rate * (double)(now - c->last_tick_ns) / 1e9;
    int64_t whole = (int64_t)c->credit;
    c->credit -= (double)whole;
    int64_t cap = (int64_t)fmax(c->rate * BURST_SECONDS, 1.0);
    int64_t tokens = atomic_load(&d->tokens);
    int64_t next;
    do {
        next = tokens + whole > cap ? cap : tokens + whole;
    } while (!atomic_compare_exchange_weak(&d->tokens, &tokens, next));
}

void alnair_compute_limit_tick(uint64_t now)
{
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) {
        struct alnair_device *d = &alnair.devices[i];
        struct controller *c = &controllers[i];
        if (!d->compute_limit_percent || !atomic_load_explicit(&d->seen, memory_order_relaxed)) continue;
        if (c->phase == 0) start_ramp(c, d, now);
        else if (c->phase == 1 && now - c->phase_start_ns >= RAMP_NS) finish_ramp(c, d, i, now);
        else if (c->phase == 2 && now - c->phase_start_ns >= FEEDBACK_NS) feedback(c, d, i, now);
        if (c->phase == 2) refill(c, d, now);
        c->last_tick_ns = now;
    }
}

/* A fork child starts its own ramp-up. */
void alnair_compute_limit_fork_child(void)
{
    memset(controllers, 0, sizeof controllers);
}
