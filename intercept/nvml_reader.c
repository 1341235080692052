/* nvml_reader.c - see nvml_reader.h. */
#define _GNU_SOURCE
#include "nvml_reader.h"
#include "intercept.h"
#include "nvml.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Busy samples every round: NVML takes one every 1/6 s to 1 s. Read every 500 ms (2 ms a read on an H100), the
 * ResNet-18 loops' GPU time fell 3-11 points under NVML's busy time until d68c3af (the time before the first period,
 * counted whole; device_busy.h). Since then 500 ms reads publish as 100 ms ones do (an H100, 2026-12-08), but the
 * caps, which act on the samples as they come, held less well on them (distance from the caps 39.2 points against
 * 28.5 over ten capped sides; docs/benchmarks.md). So every 100 ms while the process works, and once a second while it
 * idles: 1.4-2.1% of a core per working process and GPU. */
#define ROUND_NS 100000000ull
#define HELD_ROUNDS 10 /* what the GPU holds, every tenth round (each second) */
#define IDLE_ROUNDS 10 /* a device's busy samples every round until this many after the process's latest work on
                        * it, then every this many (a sample the driver dropped meanwhile held none of its work) */
#define KEPT 64               /* busy samples kept per device until taken (a round reads a few) */

struct wanted {
    uint8_t uuid[16];
    int busy, held; /* asked for */
    int busy_rounds; /* rounds the busy samples are read every round: IDLE_ROUNDS from the process's latest work */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int started; /* 1: the thread runs (or could not start, said once) */
static struct {
    struct wanted want;
    struct alnair_busy_sample busy[KEPT];
    int busy_count;
    int held_new;
    uint64_t held;
} devices[ALNAIR_CUDA_MAX_DEVICES]; /* under the lock */

/* ---- the reader thread ------------------------------------------------------------ */

static uint64_t last_us[ALNAIR_CUDA_MAX_DEVICES]; /* NVML's newest sample per device: the thread's alone */

static void keep_busy(int ordinal, const struct alnair_busy_sample *got, int n)
{
    pthread_mutex_lock(&lock);
    struct alnair_busy_sample *busy = devices[ordinal].busy;
    int *count = &devices[ordinal].busy_count;
    for (int k = 0; k < n; k++) {
        if (*count == KEPT) memmove(busy, busy + 1, (KEPT - 1) * sizeof *busy), (*count)--; /* the oldest goes */
        busy[(*count)++] = got[k];
    }
    pthread_mutex_unlock(&lock);
}

static void read_device(int ordinal, const struct wanted *want, unsigned round)
{
    void *device = alnair_nvml_device(ordinal, want->uuid);
    if (want->busy && (want->busy_rounds || round % IDLE_ROUNDS == 0)) {
        struct alnair_busy_sample got[KEPT];
        int n = alnair_nvml_busy_samples(device, &last_us[ordinal], got, KEPT);
        if (n) keep_busy(ordinal, got, n);
    }
    uint64_t held;
    if (want->held && round % HELD_ROUNDS == 0 && alnair_nvml_memory_of(device, (unsigned)getpid(), &held) == 0) {
        pthread_mutex_lock(&lock);
        devices[ordinal].held = held, devices[ordinal].held_new = 1;
        pthread_mutex_unlock(&lock);
    }
}

static void *read_nvml(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "alnair-nvml");
    for (unsigned round = 0;; round++) {
        for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) {
            pthread_mutex_lock(&lock);
            struct wanted want = devices[i].want;
            if (devices[i].want.busy_rounds) devices[i].want.busy_rounds--;
            pthread_mutex_unlock(&lock);
            if (want.busy || want.held) read_device(i, &want, round);
        }
        struct timespec pause = {0, (long)ROUND_NS};
        while (nanosleep(&pause, &pause) != 0) {
        }
    }
    return NULL;
}

/* ---- the monitor's side ---------------------------------------------------------- */

/* Asks for the device's readings (lock held); the first ask starts the thread. */
static void ask(int ordinal, const uint8_t uuid[16], int *flag)
{
    memcpy(devices[ordinal].want.uuid, uuid, sizeof devices[ordinal].want.uuid);
    *flag = 1;
    if (started) return;
    started = 1;
    sigset_t all, saved; /* the program's signal handlers must never run on our thread */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    if (pthread_create(&thread, &attr, read_nvml, NULL) != 0)
        alnair_log("alnair: cannot start the NVML thread; GPU time counts busy time whole");
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
}

static int valid(int ordinal, const uint8_t uuid[16])
{
    return uuid && ordinal >= 0 && ordinal < ALNAIR_CUDA_MAX_DEVICES;
}

int alnair_nvml_busy_taken(int ordinal, const uint8_t uuid[16], struct alnair_busy_sample *out, int max, int worked)
{
    if (!valid(ordinal, uuid)) return 0;
    pthread_mutex_lock(&lock);
    if (!devices[ordinal].want.busy) ask(ordinal, uuid, &devices[ordinal].want.busy);
    if (worked) devices[ordinal].want.busy_rounds = IDLE_ROUNDS;
    int count = devices[ordinal].busy_count, skip = count > max ? count - max : 0;
    memcpy(out, devices[ordinal].busy + skip, (size_t)(count - skip) * sizeof *out);
    devices[ordinal].busy_count = 0;
    pthread_mutex_unlock(&lock);
    return count - skip;
}

int alnair_nvml_held_taken(int ordinal, const uint8_t uuid[16], uint64_t *bytes)
{
    if (!valid(ordinal, uuid)) return 0;
    pthread_mutex_lock(&lock);
    if (!devices[ordinal].want.held) ask(ordinal, uuid, &devices[ordinal].want.held);
    int fresh = devices[ordinal].held_new;
    if (fresh) *bytes = devices[ordinal].held, devices[ordinal].held_new = 0;
    pthread_mutex_unlock(&lock);
    return fresh;
}

/* The child has no reader thread, asks afresh, and holds none of its parent's readings. */
static void fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    started = 0;
    memset(devices, 0, sizeof devices);
    memset(last_us, 0, sizeof last_us);
}
ALNAIR_ON_FORK(nvml_reader_fork, NULL, NULL, fork_child);
