/*
 * state.c - configuration from the environment, the calling thread's device,
 * and fork handling.
 *
 * Environment (read once, on first use):
 *   ALNAIR_INTERCEPT=off          pure pass-through (also 0, false, no)
 *   ALNAIR_MEMORY_LIMIT=8Gi       per-device memory limit; or "0=8Gi,1=4Gi"
 *   ALNAIR_COMPUTE_LIMIT=30       percent of each GPU; or "0=30,1=70"
 *   ALNAIR_PUBLISH_INTERVAL_MS=10 how often the monitor publishes
 * A malformed value is reported once on stderr and ignored.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "intercept.h"

struct alnair_state alnair;

static pthread_mutex_t configure_lock = PTHREAD_MUTEX_INITIALIZER;

void alnair_log(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof line - 2) n = sizeof line - 2;
    line[n] = '\n';
    fwrite(line, 1, (size_t)n + 1, stderr);
}

uint64_t alnair_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* "8Gi", "512M", "1073741824" -> bytes; -1 if malformed. */
static int parse_bytes(const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (errno || end == text || value < 0) return -1;
    static const char units[] = "KMGTP";
    double scale = 1;
    if (*end) {
        const char *u = strchr(units, toupper((unsigned char)*end));
        if (!u) return -1;
        int binary = end[1] == 'i';
        for (const char *p = units; p <= u; p++) scale *= binary ? 1024 : 1000;
        end += 1 + binary;
        if (*end == 'B' || *end == 'b') end++;
    }
    if (*end) return -1;
    *out = (uint64_t)(value * scale);
    return 0;
}

static int parse_percent(const char *text, uint64_t *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (end == text || *end || v < 1 || v > 100) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* Applies "VALUE" to every device or "DEV=VALUE,DEV=VALUE" to some; returns -1
 * (and applies nothing) if any part is malformed. */
static int parse_per_device(const char *text, int (*parse)(const char *, uint64_t *),
                            uint64_t out[ALNAIR_CUDA_MAX_DEVICES])
{
    uint64_t staged[ALNAIR_CUDA_MAX_DEVICES] = {0};
    char buf[512];
    if (strlen(text) >= sizeof buf) return -1;
    strcpy(buf, text);
    if (!strchr(buf, '=')) {
        uint64_t v;
        if (parse(buf, &v) != 0) return -1;
        for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) staged[i] = v;
    } else {
        char *save = NULL;
        for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(item, '='), *end;
            if (!eq) return -1;
            *eq = '\0';
            long dev = strtol(item, &end, 10);
            if (end == item || *end || dev < 0 || dev >= ALNAIR_CUDA_MAX_DEVICES) return -1;
            if (parse(eq + 1, &staged[dev]) != 0) return -1;
        }
    }
    memcpy(out, staged, sizeof staged);
    return 0;
}

static void configure_limits(void)
{
    uint64_t memory[ALNAIR_CUDA_MAX_DEVICES] = {0}, compute[ALNAIR_CUDA_MAX_DEVICES] = {0};
    const char *m = getenv("ALNAIR_MEMORY_LIMIT"), *c = getenv("ALNAIR_COMPUTE_LIMIT");
    if (m && *m && parse_per_device(m, parse_bytes, memory) != 0)
        alnair_log("alnair: ignoring ALNAIR_MEMORY_LIMIT=%s: want bytes like 8Gi, or 0=8Gi,1=4Gi", m);
    if (c && *c && parse_per_device(c, parse_percent, compute) != 0)
        alnair_log("alnair: ignoring ALNAIR_COMPUTE_LIMIT=%s: want a percent 1-100, or 0=30,1=70", c);
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) {
        alnair.devices[i].memory_limit_bytes = memory[i];
        alnair.devices[i].compute_limit_percent = (uint32_t)compute[i];
    }
}

static int switched_off(const char *v)
{
    return v && (!strcasecmp(v, "off") || !strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no"));
}

/* The modules' ALNAIR_ON_FORK handlers, registered by their constructors (one thread, at load). */
#define MAX_FORK_HANDLERS 16
static const struct alnair_fork_handlers *fork_handlers[MAX_FORK_HANDLERS];
static int fork_handler_count;

void alnair_on_fork(const struct alnair_fork_handlers *handlers)
{
    if (fork_handler_count < MAX_FORK_HANDLERS) fork_handlers[fork_handler_count++] = handlers;
}

static void fork_prepare(void)
{
    for (int i = fork_handler_count - 1; i >= 0; i--)
        if (fork_handlers[i]->prepare) fork_handlers[i]->prepare();
}

static void fork_parent(void)
{
    for (int i = 0; i < fork_handler_count; i++)
        if (fork_handlers[i]->parent) fork_handlers[i]->parent();
}

static void fork_child(void)
{
    for (int i = 0; i < fork_handler_count; i++)
        if (fork_handlers[i]->child) fork_handlers[i]->child();
}

/* The child is a new process: its own counters (the limits stay), segment and monitor thread. */
static void reset_in_child(void)
{
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) {
        struct alnair_device *d = &alnair.devices[i];
        uint64_t memory_limit = d->memory_limit_bytes;
        uint32_t compute_limit = d->compute_limit_percent;
        memset(d, 0, sizeof *d);
        d->memory_limit_bytes = memory_limit;
        d->compute_limit_percent = compute_limit;
    }
    pthread_mutex_init(&configure_lock, NULL);
    alnair_thread_context_changed();
}
ALNAIR_ON_FORK(state_fork, NULL, NULL, reset_in_child);

int alnair_configure(void)
{
    pthread_mutex_lock(&configure_lock);
    if (atomic_load(&alnair.mode) == ALNAIR_UNCONFIGURED) {
        int active = !switched_off(getenv("ALNAIR_INTERCEPT"));
        if (active) {
            configure_limits();
            const char *p = getenv("ALNAIR_PUBLISH_INTERVAL_MS");
            long ms = p ? strtol(p, NULL, 10) : 10;
            if (ms < 1 || ms > 60000) {
                alnair_log("alnair: ignoring ALNAIR_PUBLISH_INTERVAL_MS=%s: want 1-60000", p);
                ms = 10;
            }
            alnair.period_ms = (int)ms;
            pthread_atfork(fork_prepare, fork_parent, fork_child);
        }
        atomic_store(&alnair.mode, active ? ALNAIR_ACTIVE : ALNAIR_PASS_THROUGH);
    }
    pthread_mutex_unlock(&configure_lock);
    return atomic_load(&alnair.mode) == ALNAIR_ACTIVE;
}

/* ---- which device a thread works on ---------------------------------------- */

#define MAX_CONTEXTS 256
struct context_binding {
    _Atomic(CUcontext) ctx;
    _Atomic int device;
};
static struct context_binding contexts[MAX_CONTEXTS];

ALNAIR_TLS int alnair_thread_device = -1;

void alnair_context_bind(CUcontext ctx, CUdevice dev)
{
    if (!ctx) return;
    for (int i = 0; i < MAX_CONTEXTS; i++) {
        if (atomic_load(&contexts[i].ctx) == ctx) {
            atomic_store(&contexts[i].device, dev);
            return;
        }
    }
    for (int i = 0; i < MAX_CONTEXTS; i++) { /* claim a free slot atomically */
        CUcontext expected = NULL;
        if (atomic_compare_exchange_strong(&contexts[i].ctx, &expected, ctx)) {
            atomic_store(&contexts[i].device, dev);
            return;
        }
    }
    /* table full: threads on this context ask the driver after each switch */
}

static int context_device(CUcontext ctx)
{
    for (int i = 0; ctx && i < MAX_CONTEXTS; i++)
        if (atomic_load(&contexts[i].ctx) == ctx) return atomic_load(&contexts[i].device);
    return -1;
}

void alnair_context_forget(CUcontext ctx)
{
    for (int i = 0; i < MAX_CONTEXTS; i++) {
        CUcontext expected = ctx;
        if (ctx && atomic_compare_exchange_strong(&contexts[i].ctx, &expected, NULL)) return;
    }
}

void alnair_thread_context_changed(void) { alnair_thread_device = -1; }

void alnair_thread_uses(CUcontext ctx) { alnair_thread_device = context_device(ctx); }

/* Asks the driver which device the current context is on: only after this thread
 * switched contexts, never per launch. */
static int refresh_thread_device(void)
{
    CUcontext ctx = NULL;
    cuCtxGetCurrent_fn get_current = REAL(cuCtxGetCurrent);
    if (!get_current || get_current(&ctx) != CUDA_SUCCESS || !ctx) return -1;
    int known = context_device(ctx);
    if (known >= 0) return known;
    CUdevice dev;
    cuCtxGetDevice_fn get_device = REAL(cuCtxGetDevice);
    if (!get_device || get_device(&dev) != CUDA_SUCCESS) return -1;
    alnair_context_bind(ctx, dev);
    return dev;
}

void alnair_device_first_seen(struct alnair_device *d)
{
    atomic_store(&d->seen, 1);
    alnair_start_monitor();
}

struct alnair_device *alnair_device_at(int ordinal)
{
    if (ordinal < 0 || ordinal >= ALNAIR_CUDA_MAX_DEVICES) return NULL;
    struct alnair_device *d = &alnair.devices[ordinal];
    if (ALNAIR_UNLIKELY(!atomic_load_explicit(&d->seen, memory_order_relaxed))) alnair_device_first_seen(d);
    return d;
}

int alnair_device_ordinal(const struct alnair_device *d) { return (int)(d - alnair.devices); }

/* After a context switch on this thread: ask which device, once. */
struct alnair_device *alnair_current_device_slow(void)
{
    alnair_thread_device = refresh_thread_device();
    return alnair_device_at(alnair_thread_device);
}
