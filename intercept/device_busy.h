/*
 * device_busy.h - the GPU's own busy time, which the processes' GPU time is scaled to.
 *
 * Busy spans (gpu_time.c) run from a launch to a sync's return, so they count the GPU's idle
 * gaps inside a step (a loop whose CPU issues some kernels slower than they run: +12-18% on an
 * H100 for real training loops). The GPU itself says how much of each sample period (1/6 s to
 * 1 s) a kernel ran (NVML's utilization samples). Over each period, every process's divided
 * busy time is scaled by (the GPU's busy time) / (the union of all the processes' busy time),
 * so together they come to what the GPU ran, and alone a process gets the GPU's figure. The
 * scale never exceeds 1: busy time of processes without the library is not theirs. Periods
 * end up to a second late, so the time since the latest one counts at the latest scale.
 *
 * Pure arithmetic on times given as arguments (a simulation drives it as the library does).
 */
#ifndef ALNAIR_DEVICE_BUSY_H
#define ALNAIR_DEVICE_BUSY_H

#include <stdint.h>

#define ALNAIR_DEVICE_BUSY_TICKS 256  /* the totals' history: ~2.5 s of 10 ms ticks, beyond the samples' lag */
#define ALNAIR_DEVICE_BUSY_PERIODS 32 /* sample periods waiting for the accounting to reach their end */

/* One sample: the GPU ran kernels `busy` (0..1) of the time from the sample before to end_ns
 * (CLOCK_MONOTONIC). */
struct alnair_busy_sample {
    uint64_t end_ns;
    double busy;
};

struct alnair_device_busy {
    struct { uint64_t ms; double all, own; } ticks[ALNAIR_DEVICE_BUSY_TICKS]; /* totals accounted before ms */
    unsigned newest, count;
    struct { uint64_t start_ns, end_ns; double busy; } periods[ALNAIR_DEVICE_BUSY_PERIODS];
    unsigned first_period, periods_waiting;
    uint64_t sample_end_ns;   /* the latest sample's end (0: none yet) */
    double recent_busy;       /* the periods' busy part, averaged over the last ALNAIR_DEVICE_RECENT_NS or so */
    int busy_known;           /* a period's sample came (recent_busy holds) */
    double scaled_own;        /* `scaled` covers this much of the process's divided busy time */
    double scaled;            /* that time, scaled */
    double recent_gpu, recent_all; /* the periods' GPU busy time and processes' busy time, the older less by e
                                      every ALNAIR_DEVICE_RECENT_NS of the processes' busy time: their ratio is
                                      what the time since the latest period counts at, */
    int scaled_any;           /* ...if a period was applied (1 before) */
};

/* Zeroed is initialized (a static device, a fork child's reset). */

/* The latest scale: the recent periods' GPU busy time / all the processes' busy time (1 before any). */
static inline double alnair_device_busy_scale(const struct alnair_device_busy *b)
{
    return b->scaled_any ? b->recent_gpu / b->recent_all : 1.0; /* recent_all > 0 once a period was applied */
}

/* Whether the GPU ran work at least ALNAIR_DEVICE_SATURATED of its recent time (the samples' busy part, each weighing
 * less by e every ALNAIR_DEVICE_RECENT_NS), or gave no period's sample yet: below, no process's work waited for the
 * GPU all that time, so none was kept from it (a share holds back only then). The average spares loops that keep
 * the GPU busy only in bursts shorter than a second; sustained contention reaches it within ~1 s. */
#define ALNAIR_DEVICE_SATURATED 0.9
#define ALNAIR_DEVICE_RECENT_NS 500000000.0
static inline int alnair_device_busy_saturated(const struct alnair_device_busy *b)
{
    return !b->busy_known || b->recent_busy >= ALNAIR_DEVICE_SATURATED;
}

/* Turns (turns.h) start once the GPU is saturated and stop only when its recent busy part falls under this: a
 * turn's gaps go unfilled while the others hold, so with turns on the samples read the loops' own busy part (a
 * ResNet-18 b128 pair on an H100: 81-99% a sample, its turns on for 12-13% of the time, on and off every second). */
#define ALNAIR_DEVICE_TURNS_OFF 0.85
static inline int alnair_device_busy_under(const struct alnair_device_busy *b, double part)
{
    return b->busy_known && b->recent_busy < part;
}

/* After a tick's accounting: the union of all the processes' busy time and this process's divided
 * busy time, both totals of the ms before `ms`. */
void alnair_device_busy_counted(struct alnair_device_busy *b, uint64_t ms, double all_ns, double own_ns);

/* New samples, oldest first (those not after the latest one already given are ignored). */
void alnair_device_busy_sampled(struct alnair_device_busy *b, const struct alnair_busy_sample *s, int n);

/* This process's GPU time: its divided busy time, scaled period by period (the last part at the latest scale).
 * Before the first period the time counts whole; with `wait_first`, not at all while a sample came and the period
 * it starts is still to come (up to ~1 s): a figure kept from ever falling must not take that time whole, or it
 * stands still until the periods catch up (the likely cause of error 9 in docs/intercept.md). The first period
 * counts the time at its own scale. */
double alnair_device_busy_scaled(struct alnair_device_busy *b, int wait_first);

#endif
