/*
 * device_busy_cases.c - drives intercept/device_busy.c with a process's totals and the GPU's samples as
 * the monitor thread gives them, and prints its scaled GPU time (ns) after each case:
 *
 *   device_busy_cases CASE
 *
 * Every case: one tick a 10 ms, each adding `own` ns of this process's divided busy time and `all` ns of all
 * the processes' busy time, for 5 s; at the first tick the driver's latest sample, of the time before (as the NVML
 * thread's first read finds it), then samples every 200 ms, given 300 ms late. The cases:
 *   none      no samples at all
 *   half      the GPU busy 50% of each period, the process alone and busy all the time
 *   peer      50% busy, the process half of all the processes' busy time
 *   disorder  as half, each sample given twice and with an older one after it
 *   over      busy 7 (more than the whole period), nan (not a number), negative (-1)
 *   late      samples after the first given 2.9 s late, older than the ticks kept (256: 2.56 s)
 *   edge      as half, but idle from 2 s to 2.4 s but for 2 ms at 2.01 s, in a period the GPU calls 0% busy
 * "falls" counts the ticks after which the scaled time fell, and "highest" is its highest part of the process's own
 * time after a tick (gpu_time.c publishes the highest scaled time: one taken too high stands still until the truth
 * catches up); "saturated" is whether the periods' samples say the GPU ran work nearly all its recent time (a share's
 * debts count only then); "lowest" is the lowest scale after the first period, what the time after the latest
 * period counts at.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "device_busy.h"

#define MS 1000000ull

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "none";
    static struct alnair_device_busy b; /* zeroed is initialized */
    double own = 0, all = 0;
    uint64_t lag_ms = strcmp(c, "late") ? 300 : 2900, start_ms = 1000;
    double own_per_tick = strcmp(c, "peer") ? 10 * MS : 5 * MS, all_per_tick = 10 * MS;
    uint64_t next_sample_ms = start_ms;
    double busy = !strcmp(c, "over") ? 7 : !strcmp(c, "nan") ? NAN : !strcmp(c, "negative") ? -1 : 0.5, last_scaled = 0;
    int falls = 0, edge = !strcmp(c, "edge");
    double lowest = 1;
    double highest = 0;
    for (uint64_t ms = start_ms; ms <= start_ms + 5000; ms += 10) {
        int idle = edge && ms > 2000 && ms <= 2400, tail = idle && ms == 2010;
        own += idle ? (tail ? 2 * MS : 0) : own_per_tick, all += idle ? (tail ? 2 * MS : 0) : all_per_tick;
        alnair_device_busy_counted(&b, ms, all, own);
        if (ms == start_ms && strcmp(c, "none")) {
            struct alnair_busy_sample before = {(start_ms - 200) * MS, busy};
            alnair_device_busy_sampled(&b, &before, 1);
        }
        while (strcmp(c, "none") && next_sample_ms + lag_ms <= ms) {
            struct alnair_busy_sample s[3];
            int n = 1;
            s[0] = (struct alnair_busy_sample){next_sample_ms * MS, edge && next_sample_ms == 2200 ? 0 : busy};
            if (!strcmp(c, "disorder")) {
                s[1] = s[0];                                                           /* repeated */
                s[2] = (struct alnair_busy_sample){(next_sample_ms - 100) * MS, 0.9}; /* older */
                n = 3;
            }
            alnair_device_busy_sampled(&b, s, n);
            next_sample_ms += 200;
        }
        if (b.scaled_any && alnair_device_busy_scale(&b) < lowest) lowest = alnair_device_busy_scale(&b);
        double scaled = alnair_device_busy_scaled(&b, 1);
        falls += scaled < last_scaled - 1;
        if (scaled / own > highest) highest = scaled / own;
        last_scaled = scaled;
    }
    printf("own %.0f all %.0f scaled %.0f scale %.4f falls %d highest %.6f saturated %d lowest %.4f\n", own, all,
           alnair_device_busy_scaled(&b, 1), alnair_device_busy_scale(&b), falls, highest,
           alnair_device_busy_saturated(&b), lowest);
    return 0;
}
