/*
 * state.c - configuration from the environment, the calling thread's device,
 * and fork handling.
 *
 * Environment (read once, on first use):
 *   ALNAIR_INTERCEPT=off          pure pass-through (also 0, false, no)
 *   ALNAIR_MEMORY_LIMIT=8Gi       per-device memory limit; or "0=8Gi,1=4Gi"
 *   ALNAIR_COMPUTE_LIMIT=30       a cap: at most this percent of each GPU's time; or "0=30,1=70"
 *   ALNAIR_COMPUTE_SHARE=30       a share: at least this percent while others want the GPU; or "0=30,1=70"
 *   ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT=off  on: the memory limit charges the contexts' own memory too
 *   ALNAIR_PUBLISH_INTERVAL_MS=10 how often the monitor publishes
 * A malformed value costs one stderr line and counts as unset (the grammar and
 * the refusal rules: docs/intercept.md, "Configuration").
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <stddef.h>
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

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t alnair_monotonic_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

uint64_t alnair_boottime_ns(void) { return clock_ns(CLOCK_BOOTTIME); }

uint64_t alnair_realtime_ns(void) { return clock_ns(CLOCK_REALTIME); }

/* The first caller's time wins; a late racer finds it set and leaves it. */
void alnair_note_first_slow(_Atomic uint64_t *boottime_ns)
{
    uint64_t unset = 0;
    atomic_compare_exchange_strong(boottime_ns, &unset, alnair_boottime_ns());
}

/* ---- configuration: strict parsing, once per process ----------------------
 *
 * A value is taken whole or not at all: a value read half-right (1e30 or nan as
 * no limit or 2^63 bytes, "0=1Gi,0=2Gi" as 2Gi, "10abc" as 10) looks as if it worked.
 * Anything outside the grammar below costs one stderr line, and the variable
 * counts as unset. Spans (s, e) let list items be parsed in place, unbounded. */

#define MAX_LIMIT_BYTES (1ull << 50) /* 1Pi: far above any GPU, far below overflow in size sums */
#define DEFAULT_PERIOD_MS 10
_Static_assert(ALNAIR_CUDA_MAX_DEVICES == 64, "the device-index message says 0-63");

typedef const char *(*value_parser)(const char *s, const char *e, uint64_t *out);

/* Decimal digits only (no sign, space or base prefix); returns where they end.
 * *out saturates just above cap, so a run of digits that would overflow reads as too big. */
static const char *scan_digits(const char *s, const char *e, uint64_t cap, uint64_t *out)
{
    uint64_t v = 0;
    for (; s < e && *s >= '0' && *s <= '9'; s++) v = v > cap ? v : v * 10 + (uint64_t)(*s - '0');
    *out = v;
    return s;
}

/* "", or K, M, G, T, P (any case), then a lowercase i for powers of 1024, then an optional B or b. */
static const char *scan_unit(const char *p, const char *e, uint64_t *scale)
{
    static const char units[] = "KMGTP";
    *scale = 1;
    if (p == e) return p;
    const char *u = strchr(units, toupper((unsigned char)*p++));
    if (!u || !*u) return NULL;
    int binary = p < e && *p == 'i';
    p += binary;
    for (const char *q = units; q <= u; q++) *scale *= binary ? 1024 : 1000;
    return p + (p < e && (*p == 'B' || *p == 'b'));
}

/* scale x 0.DIGITS, exactly, or -1 if that is not a whole number. From the last digit,
 * t = (t + digit x scale) / 10: if the total is whole every step is (t_next = 10 t - digit x scale),
 * so one inexact step proves it fractional, and t < scale keeps every sum far from overflow. */
static int scaled_fraction(const char *d, const char *e, uint64_t scale, uint64_t *out)
{
    uint64_t t = 0;
    while (e > d) {
        t += (uint64_t)(*--e - '0') * scale;
        if (t % 10) return -1;
        t /= 10;
    }
    *out = t;
    return 0;
}

static const char want_bytes[] = "want bytes like 8Gi, 512M or 1073741824, or per device 0=8Gi,1=4Gi";
static const char too_big[] = "more than 1Pi (2^50 bytes)";

/* DIGITS[.DIGITS][UNIT] -> 1 .. MAX_LIMIT_BYTES bytes, exactly: "1.5Gi" is 1610612736, "0.5" is refused. */
static const char *parse_bytes(const char *s, const char *e, uint64_t *out)
{
    uint64_t whole, ignored, scale, part;
    const char *p = scan_digits(s, e, MAX_LIMIT_BYTES, &whole), *frac = p, *frac_end = p;
    if (p == s) return want_bytes;
    if (p < e && *p == '.') {
        frac = p + 1;
        frac_end = p = scan_digits(frac, e, 0, &ignored);
        if (frac_end == frac) return want_bytes;
    }
    if (!(p = scan_unit(p, e, &scale)) || p != e) return want_bytes;
    if (whole > MAX_LIMIT_BYTES / scale) return too_big; /* so whole x scale + part cannot overflow */
    if (scaled_fraction(frac, frac_end, scale, &part) != 0) return "not a whole number of bytes";
    uint64_t bytes = whole * scale + part;
    if (bytes > MAX_LIMIT_BYTES) return too_big;
    if (!bytes) return "a limit of 0 bytes (leave it unset for no limit)"; /* 0 would mean unlimited */
    *out = bytes;
    return NULL;
}

static const char *parse_percent(const char *s, const char *e, uint64_t *out)
{
    uint64_t v;
    if (s == e || scan_digits(s, e, 100, &v) != e || v < 1 || v > 100)
        return "want a percent 1-100, or per device 0=30,1=70";
    *out = v;
    return NULL;
}

/* One DEV=VALUE item of a per-device list; given[] catches a device named twice. */
static const char *parse_item(const char *s, const char *e, value_parser parse, uint64_t staged[],
                              unsigned char given[])
{
    uint64_t dev;
    if (s == e) return "an empty item in the per-device list";
    const char *eq = memchr(s, '=', (size_t)(e - s));
    if (!eq) return "an item of the per-device list is not DEV=VALUE";
    if (eq == s || scan_digits(s, eq, ALNAIR_CUDA_MAX_DEVICES, &dev) != eq || dev >= ALNAIR_CUDA_MAX_DEVICES)
        return "a device index is not 0-63";
    if (given[dev]++) return "a device is given twice";
    return parse(eq + 1, e, &staged[dev]);
}

/* "VALUE" for every device or "DEV=VALUE,DEV=VALUE" for some (the rest unlimited);
 * returns why not, applying nothing, if any part is malformed. */
static const char *parse_per_device(const char *text, value_parser parse, uint64_t out[ALNAIR_CUDA_MAX_DEVICES])
{
    uint64_t staged[ALNAIR_CUDA_MAX_DEVICES] = {0};
    unsigned char given[ALNAIR_CUDA_MAX_DEVICES] = {0};
    const char *end = text + strlen(text), *why = NULL;
    if (!strchr(text, '=')) {
        uint64_t v = 0;
        why = parse(text, end, &v);
        for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) staged[i] = v;
    } else {
        for (const char *item = text, *comma; !why; item = comma + 1) {
            comma = memchr(item, ',', (size_t)(end - item));
            why = parse_item(item, comma ? comma : end, parse, staged, given);
            if (!comma) break;
        }
    }
    if (!why) memcpy(out, staged, sizeof staged);
    return why;
}

/* The value as it was, in quotes, with quotes, backslashes and control bytes as \xNN:
 * a value holding a newline still makes one line, and a huge one is cut short. */
static void quote(const char *v, char *out, size_t size)
{
    size_t n = 0;
    out[n++] = '"';
    for (; *v && n + 9 <= size; v++) {
        unsigned char c = (unsigned char)*v;
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') n += (size_t)snprintf(out + n, size - n, "\\x%02x", c);
        else out[n++] = (char)c;
    }
    snprintf(out + n, size - n, "%s\"", *v ? "..." : "");
}

static void report_ignored(const char *name, const char *value, const char *why, const char *instead)
{
    char shown[160];
    quote(value, shown, sizeof shown);
    alnair_log("alnair: ignoring %s=%s: %s; %s", name, shown, why, instead);
}

/* Unset and empty mean the default, silently. */
static const char *setting(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static void configure_limits(void)
{
    uint64_t memory[ALNAIR_CUDA_MAX_DEVICES] = {0}, compute[ALNAIR_CUDA_MAX_DEVICES] = {0};
    uint64_t share[ALNAIR_CUDA_MAX_DEVICES] = {0};
    const char *m = setting("ALNAIR_MEMORY_LIMIT"), *c = setting("ALNAIR_COMPUTE_LIMIT"), *why;
    const char *s = setting("ALNAIR_COMPUTE_SHARE");
    if (m && (why = parse_per_device(m, parse_bytes, memory)))
        report_ignored("ALNAIR_MEMORY_LIMIT", m, why, "running with no memory limit");
    if (c && (why = parse_per_device(c, parse_percent, compute)))
        report_ignored("ALNAIR_COMPUTE_LIMIT", c, why, "running with no compute limit");
    if (s && (why = parse_per_device(s, parse_percent, share)))
        report_ignored("ALNAIR_COMPUTE_SHARE", s, why, "running with no compute share");
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) {
        alnair.devices[i].memory_limit_bytes = memory[i];
        alnair.devices[i].compute_limit_percent = (uint32_t)compute[i];
        alnair.devices[i].compute_share_percent = (uint32_t)share[i];
    }
}

static int publish_period_ms(void)
{
    const char *p = setting("ALNAIR_PUBLISH_INTERVAL_MS");
    uint64_t ms;
    if (!p) return DEFAULT_PERIOD_MS;
    if (scan_digits(p, p + strlen(p), 60000, &ms) == p + strlen(p) && ms >= 1 && ms <= 60000) return (int)ms;
    report_ignored("ALNAIR_PUBLISH_INTERVAL_MS", p, "want milliseconds 1-60000", "publishing every 10 ms");
    return DEFAULT_PERIOD_MS;
}

static int kernel_names_top(void)
{
    const char *p = setting("ALNAIR_KERNEL_NAMES_TOP");
    uint64_t n;
    if (!p) return ALNAIR_KERNEL_NAMES_TOP_DEFAULT;
    if (scan_digits(p, p + strlen(p), ALNAIR_KERNEL_NAMES_TOP_MAX, &n) == p + strlen(p) && n <= ALNAIR_KERNEL_NAMES_TOP_MAX)
        return (int)n;
    report_ignored("ALNAIR_KERNEL_NAMES_TOP", p, "want a number of kernels 0-32", "naming the 20 most launched");
    return ALNAIR_KERNEL_NAMES_TOP_DEFAULT;
}

/* A switch: off, 0, false, no or on, 1, true, yes (any case); unset means the default, anything else
 * is reported and counts as unset, like every variable. */
static int switch_setting(const char *name, int default_on, const char *instead)
{
    static const char *const off[] = {"off", "0", "false", "no"}, *const on[] = {"on", "1", "true", "yes"};
    const char *v = setting(name);
    if (!v) return default_on;
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        if (!strcasecmp(v, off[i])) return 0;
        if (!strcasecmp(v, on[i])) return 1;
    }
    report_ignored(name, v, default_on ? "want off, 0, false or no (or on, 1, true, yes)"
                                       : "want on, 1, true or yes (or off, 0, false, no)", instead);
    return default_on;
}

/* The kill switch: off passes everything through. */
static int intercept_wanted(void) { return switch_setting("ALNAIR_INTERCEPT", 1, "intercepting"); }

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
        uint32_t compute_limit = d->compute_limit_percent, compute_share = d->compute_share_percent;
        int seen = atomic_load(&d->seen);
        /* A device the parent never used has an empty kernel table: its 16 KiB stay untouched pages. */
        memset(d, 0, offsetof(struct alnair_device, kernels));
        if (seen) memset(&d->kernels, 0, sizeof d->kernels);
        d->memory_limit_bytes = memory_limit;
        d->compute_limit_percent = compute_limit;
        d->compute_share_percent = compute_share;
    }
    atomic_store(&alnair.first_launch_boottime_ns, 0);
    atomic_store(&alnair.first_allocation_boottime_ns, 0);
    pthread_mutex_init(&configure_lock, NULL);
    alnair_thread_context_changed();
}
ALNAIR_ON_FORK(state_fork, NULL, NULL, reset_in_child);

int alnair_configure(void)
{
    pthread_mutex_lock(&configure_lock);
    if (atomic_load(&alnair.mode) == ALNAIR_UNCONFIGURED) {
        int active = intercept_wanted();
        if (active) {
            configure_limits();
            alnair.limit_includes_context = switch_setting("ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT", 0,
                                                           "the memory limit leaves the context out");
            alnair.period_ms = publish_period_ms();
            alnair.kernel_names_top = kernel_names_top();
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
    _Atomic int measured;    /* its own memory was measured (or that was tried) */
    _Atomic uint64_t bytes;  /* what it added to its device's context_bytes */
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
            atomic_store(&contexts[i].measured, 0);
            atomic_store(&contexts[i].bytes, 0);
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

struct alnair_device *alnair_context_device(CUcontext ctx) { return alnair_device_at(context_device(ctx)); }

static struct context_binding *binding_of(CUcontext ctx)
{
    for (int i = 0; ctx && i < MAX_CONTEXTS; i++)
        if (atomic_load(&contexts[i].ctx) == ctx) return &contexts[i];
    return NULL;
}

int alnair_context_claim_measurement(CUcontext ctx)
{
    struct context_binding *b = binding_of(ctx);
    int unmeasured = 0;
    return b && atomic_compare_exchange_strong(&b->measured, &unmeasured, 1);
}

void alnair_context_charge(CUcontext ctx, uint64_t bytes)
{
    struct context_binding *b = binding_of(ctx);
    struct alnair_device *d = b ? alnair_device_at(atomic_load(&b->device)) : NULL;
    if (!d || !bytes) return;
    atomic_store(&b->bytes, bytes);
    atomic_fetch_add(&d->context_bytes, bytes);
}

void alnair_context_forget(CUcontext ctx)
{
    for (int i = 0; i < MAX_CONTEXTS; i++) {
        CUcontext expected = ctx;
        if (!ctx || atomic_load(&contexts[i].ctx) != ctx) continue;
        uint64_t bytes = atomic_exchange(&contexts[i].bytes, 0);
        struct alnair_device *d = alnair_device_at(atomic_load(&contexts[i].device));
        if (atomic_compare_exchange_strong(&contexts[i].ctx, &expected, NULL)) {
            if (d && bytes) atomic_fetch_sub(&d->context_bytes, bytes);
            return;
        }
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

static void (*_Atomic on_first_device)(void); /* the monitor's start: it registers, so state never calls it */

void alnair_on_first_device(void (*start)(void)) { atomic_store(&on_first_device, start); }

void alnair_device_first_seen(struct alnair_device *d)
{
    atomic_store(&d->seen, 1);
    void (*start)(void) = atomic_load(&on_first_device);
    if (start) start();
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
