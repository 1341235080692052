/*
 * shm_test_writer.c - a stand-alone cuda-kind writer for tests and benchmarks.
 *
 * It publishes through the same shm_segment.c the CUDA intercept uses, with values
 * given on the command line, so reader tests check the real writer's bytes.
 *
 *   alnair-shm-test-writer [--devices N] [--set FIELD=V]... [--kernel DEV:NAME=N]... [--record-size BYTES]
 *                          [--churn] [--period-ms P]
 *
 * Device i gets FIELD = V + i; a copy field is DIRECTION.FIELD (host_to_device.bytes), an
 * activity field (first_launch_ns, ...) is the process's, V itself; a memory field (context_bytes,
 * pool_reserved_bytes, pool_used_bytes, charged_bytes) is device i's, V + i. --kernel adds a row to the
 * kernel table: N launches of NAME on device DEV (an empty NAME: the device's OTHER row). --record-size publishes
 * only the record's first BYTES (at least its devices), as a writer older than the fields
 * past them did (8224: no activity, no copies). It prints "ready PATH" once published, then waits
 * until stdin closes or SIGTERM (removing the segment); SIGKILL leaves it behind
 * as a dead writer's. --churn republishes in a tight loop with every counter equal
 * to a running count (a torn read shows as unequal counters); --period-ms P
 * republishes every P ms, like the intercept, with one kernel launch per device for
 * each P ms of the monotonic clock since start: the rate is 1000/P per second exactly,
 * however late the process wakes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shm_segment.h"

struct field_spec {
    const char *name;
    size_t offset;
};

#define FIELD(f) {#f, offsetof(struct alnair_cuda_device, f)}
static const struct field_spec counters[] = {
    FIELD(kernel_launches), FIELD(graph_launches), FIELD(bytes_in_use),
    FIELD(peak_bytes), FIELD(allocations), FIELD(failed_allocations),
    FIELD(limit_denied_allocations), FIELD(memory_limit_bytes), FIELD(compute_quota_ns), FIELD(compute_period_ns),
    FIELD(throttled_ns),
};
#define N_COUNTERS (sizeof counters / sizeof counters[0])

#define COPY_FIELDS(direction, k) \
    {#direction ".copies", offsetof(struct alnair_cuda_device_ext, copies[k].copies)}, \
    {#direction ".bytes", offsetof(struct alnair_cuda_device_ext, copies[k].bytes)}, \
    {#direction ".sync_ns", offsetof(struct alnair_cuda_device_ext, copies[k].sync_ns)}
static const struct field_spec ext_fields[] = {
    COPY_FIELDS(host_to_device, ALNAIR_COPY_HOST_TO_DEVICE),
    COPY_FIELDS(device_to_host, ALNAIR_COPY_DEVICE_TO_HOST),
    COPY_FIELDS(device_to_device, ALNAIR_COPY_DEVICE_TO_DEVICE),
};

#define MEMORY(f) {#f, offsetof(struct alnair_cuda_device_memory, f)}
static const struct field_spec memory_fields[] = {
    MEMORY(context_bytes), MEMORY(pool_reserved_bytes), MEMORY(pool_used_bytes), MEMORY(charged_bytes),
};

#define ACTIVITY(f) {#f, offsetof(struct alnair_cuda_activity, f)}
static const struct field_spec activity_fields[] = {
    ACTIVITY(first_launch_ns), ACTIVITY(first_allocation_ns), ACTIVITY(last_launch_time_ns),
};
#define COUNT(table) (sizeof table / sizeof table[0])

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static void usage(void)
{
    fprintf(stderr, "usage: alnair-shm-test-writer [--devices N] [--set FIELD=V]... [--kernel DEV:NAME=N]... "
                    "[--compute-limit PCT] [--record-size BYTES] [--churn] [--period-ms P]\n");
    exit(2);
}

static uint64_t *counter(struct alnair_cuda_device *d, size_t i)
{
    return (uint64_t *)((char *)d + counters[i].offset);
}

/* The table's field named by spec up to its '=', or NULL. */
static const struct field_spec *find(const struct field_spec *table, size_t n, const char *spec, const char *eq)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(table[i].name) == (size_t)(eq - spec) && strncmp(table[i].name, spec, (size_t)(eq - spec)) == 0)
            return &table[i];
    return NULL;
}

static void set_u64(void *base, size_t offset, uint64_t v) { *(uint64_t *)((char *)base + offset) = v; }

static int set_field(struct alnair_cuda_record *r, const char *spec)
{
    const char *eq = strchr(spec, '=');
    const struct field_spec *f;
    if (!eq) return -1;
    uint64_t v = strtoull(eq + 1, NULL, 10);
    if ((f = find(counters, N_COUNTERS, spec, eq)))
        for (uint32_t d = 0; d < r->max_devices; d++) set_u64(&r->devices[d], f->offset, v + d);
    else if ((f = find(ext_fields, COUNT(ext_fields), spec, eq)))
        for (uint32_t d = 0; d < r->max_devices; d++) set_u64(&r->devices_ext[d], f->offset, v + d);
    else if ((f = find(memory_fields, COUNT(memory_fields), spec, eq)))
        for (uint32_t d = 0; d < r->max_devices; d++) set_u64(&r->devices_memory[d], f->offset, v + d);
    else if ((f = find(activity_fields, COUNT(activity_fields), spec, eq)))
        set_u64(&r->activity, f->offset, v);
    else
        return -1;
    return 0;
}

/* "DEV:NAME=N": a row of the kernel table. */
static int add_kernel(struct alnair_cuda_kernels *t, const char *spec)
{
    const char *colon = strchr(spec, ':'), *eq = strrchr(spec, '=');
    if (!colon || !eq || eq < colon || t->count == ALNAIR_CUDA_MAX_KERNELS) return -1;
    struct alnair_cuda_kernel *k = &t->kernels[t->count++];
    size_t n = (size_t)(eq - colon - 1);
    if (n >= sizeof k->name) return -1;
    memcpy(k->name, colon + 1, n);
    k->device_index = (uint32_t)atoi(spec);
    k->launches = strtoull(eq + 1, NULL, 10);
    k->flags = n ? 0 : ALNAIR_CUDA_KERNEL_OTHER;
    return 0;
}

static void init_devices(struct alnair_cuda_record *r, uint32_t n)
{
    r->device_count = n;
    r->max_devices = ALNAIR_CUDA_MAX_DEVICES;
    for (uint32_t d = 0; d < ALNAIR_CUDA_MAX_DEVICES; d++) {
        r->devices[d].device_index = d;
        for (int k = 0; k < 16; k++) r->devices[d].uuid[k] = (uint8_t)(d * 16 + k);
    }
}

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void spin_ns(uint64_t ns)
{
    for (uint64_t end = monotonic_ns() + ns; monotonic_ns() < end;)
        ;
}

static void churn(struct alnair_segment *seg, struct alnair_cuda_record *r)
{
    for (uint64_t n = 1; !stop; n++) {
        alnair_segment_publish_begin(seg);
        for (uint32_t d = 0; d < r->device_count; d++)
            for (size_t i = 0; i < N_COUNTERS; i++)
                __atomic_store_n(counter(&r->devices[d], i), n, __ATOMIC_RELAXED);
        alnair_segment_publish_end(seg);
        spin_ns(10000); /* nanosleep would oversleep by the timer slack */
    }
}

/* Waits for stdin to close or a signal; with a period, republishes meanwhile. */
static void hold(struct alnair_segment *seg, struct alnair_cuda_record *r, int period_ms)
{
    struct pollfd in = {.fd = 0, .events = POLLIN};
    char buf[64];
    uint64_t start = monotonic_ns(), periods = 0;
    while (!stop) {
        int n = poll(&in, 1, period_ms > 0 ? period_ms : -1);
        if (n > 0 && read(0, buf, sizeof buf) <= 0) return;
        if (n == 0) {
            uint64_t due = (monotonic_ns() - start) / ((uint64_t)period_ms * 1000000u);
            alnair_segment_publish_begin(seg);
            for (uint32_t d = 0; d < r->device_count; d++) r->devices[d].kernel_launches += due - periods;
            alnair_segment_publish_end(seg);
            periods = due;
        }
        if (n < 0 && errno != EINTR) return;
    }
}

int main(int argc, char **argv)
{
    uint32_t devices = 1;
    int churn_mode = 0, period_ms = 0;
    uint32_t record_size = sizeof(struct alnair_cuda_record);
    static struct alnair_cuda_record staged; /* 46 KiB: not on the stack */
    init_devices(&staged, devices);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            devices = (uint32_t)atoi(argv[++i]);
            if (devices > ALNAIR_CUDA_MAX_DEVICES) usage();
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            if (set_field(&staged, argv[++i]) != 0) usage();
        } else if (!strcmp(argv[i], "--kernel") && i + 1 < argc) {
            if (add_kernel(&staged.kernels, argv[++i]) != 0) usage();
        } else if (!strcmp(argv[i], "--compute-limit") && i + 1 < argc) {
            uint32_t pct = (uint32_t)atoi(argv[++i]);
            for (uint32_t d = 0; d < ALNAIR_CUDA_MAX_DEVICES; d++)
                staged.devices[d].compute_limit_percent = pct;
        } else if (!strcmp(argv[i], "--record-size") && i + 1 < argc) {
            record_size = (uint32_t)atoi(argv[++i]);
            if (record_size < offsetof(struct alnair_cuda_record, activity) || record_size > sizeof staged) usage();
        } else if (!strcmp(argv[i], "--churn")) {
            churn_mode = 1;
        } else if (!strcmp(argv[i], "--period-ms") && i + 1 < argc) {
            period_ms = atoi(argv[++i]);
        } else {
            usage();
        }
    }
    staged.device_count = devices;

    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    struct alnair_segment seg;
    char err[512];
    if (alnair_segment_create(&seg, ALNAIR_KIND_CUDA, record_size, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct alnair_cuda_record *r = seg.record;
    alnair_segment_publish_begin(&seg);
    memcpy(r, &staged, record_size);
    alnair_segment_publish_end(&seg);
    printf("ready %s\n", seg.path);
    fflush(stdout);

    if (churn_mode) churn(&seg, r);
    else hold(&seg, r, period_ms);
    alnair_segment_close(&seg, 1);
    return 0;
}
