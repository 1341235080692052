/*
 * device_busy.c - see device_busy.h.
 *
 * The accounting's totals are kept once per tick (by the ms they reach); a sample period's
 * totals are read between ticks by straight lines. A period is applied once the accounting
 * has reached its end; the time between the periods applied (a period lost or older than the
 * ticks kept) counts at the scale before it. The first period applied is one the accounting saw whole.
 */
#include "device_busy.h"

#include <math.h>

#define MS 1000000.0
#define FIRST_PERIOD_NS 2e9 /* a first sample's period ends within this (NVML: 1/6 s to 1 s, seen up to 0.1 s late) */

/* The totals before ms (a fraction of one) from the ticks kept: 1 found, 0 not accounted yet, -1 older than kept. */
static int totals_at(const struct alnair_device_busy *b, double ms, double *all, double *own)
{
    if (!b->count || ms > (double)b->ticks[b->newest].ms) return 0;
    unsigned i = b->newest;
    for (unsigned k = 1; k < b->count; k++) {
        unsigned older = (i + ALNAIR_DEVICE_BUSY_TICKS - 1) % ALNAIR_DEVICE_BUSY_TICKS;
        if ((double)b->ticks[older].ms <= ms) {
            double span = (double)(b->ticks[i].ms - b->ticks[older].ms), f = span > 0 ? (ms - b->ticks[older].ms) / span : 1;
            *all = b->ticks[older].all + f * (b->ticks[i].all - b->ticks[older].all);
            *own = b->ticks[older].own + f * (b->ticks[i].own - b->ticks[older].own);
            return 1;
        }
        i = older;
    }
    if (ms < (double)b->ticks[i].ms) return -1;
    *all = b->ticks[i].all, *own = b->ticks[i].own;
    return 1;
}

/* A period into the latest scale: the periods' GPU busy time over their processes' busy time, the older weighing
 * less by e every ALNAIR_DEVICE_RECENT_NS of the processes' busy time. A ratio, not the latest period's: a period at
 * an idle spell's edge holds a few ms of the processes' busy time, where NVML's whole percents (and a stamp a little
 * off the host's clock) can say anything from 0 to 1, and the scale it set would value the time until the next
 * period is applied (up to 0.7 s on an H100), and the limits' debts with it. Aged by busy time, not by the clock,
 * so that an idle spell, however long, leaves the scale from before it to the first ms after it. */
static void recent(struct alnair_device_busy *b, double gpu, double all)
{
    double keep = b->scaled_any ? exp(-all / ALNAIR_DEVICE_RECENT_NS) : 0;
    b->recent_gpu = b->recent_gpu * keep + gpu;
    b->recent_all = b->recent_all * keep + all;
    b->scaled_any = 1;
}

/* Periods whose end the accounting has reached, into `scaled` and `scale`. */
static void apply(struct alnair_device_busy *b)
{
    for (; b->periods_waiting; b->first_period = (b->first_period + 1) % ALNAIR_DEVICE_BUSY_PERIODS, b->periods_waiting--) {
        const double start = (double)b->periods[b->first_period].start_ns / MS, end = (double)b->periods[b->first_period].end_ns / MS;
        double all_s, own_s, all_e, own_e;
        if (totals_at(b, end, &all_e, &own_e) == 0) return;
        if (totals_at(b, start, &all_s, &own_s) == 1 && own_s >= b->scaled_own) {
            double before = alnair_device_busy_scale(b), all = all_e - all_s;
            double busy = b->periods[b->first_period].busy * (end - start) * MS, gpu = busy < all ? busy : all;
            double period = all > 0 ? gpu / all : before;
            /* the time since the last period applied at the latest scale; before the first, at the first's */
            b->scaled += (own_s - b->scaled_own) * (b->scaled_any ? before : period);
            b->scaled += (own_e - own_s) * period;
            if (all > 0) recent(b, gpu, all);
        } else if (!b->scaled_any) {
            continue; /* a first period from before the accounting began: the next one says the scale */
        } else if (own_e >= b->scaled_own) {
            b->scaled += (own_e - b->scaled_own) * alnair_device_busy_scale(b);
        } else {
            continue; /* a period before the last one applied */
        }
        b->scaled_own = own_e;
    }
}

void alnair_device_busy_counted(struct alnair_device_busy *b, uint64_t ms, double all_ns, double own_ns)
{
    if (!ms) return; /* nothing accounted yet: a tick at 0 would stand for every ms before the first */
    if (!b->count || ms > b->ticks[b->newest].ms) {
        b->newest = b->count ? (b->newest + 1) % ALNAIR_DEVICE_BUSY_TICKS : 0;
        if (b->count < ALNAIR_DEVICE_BUSY_TICKS) b->count++;
    }
    b->ticks[b->newest].ms = ms, b->ticks[b->newest].all = all_ns, b->ticks[b->newest].own = own_ns;
    apply(b);
}

void alnair_device_busy_sampled(struct alnair_device_busy *b, const struct alnair_busy_sample *s, int n)
{
    for (int i = 0; i < n; i++) {
        if (s[i].end_ns <= b->sample_end_ns) continue;
        double busy = !(s[i].busy >= 0) ? 0 : s[i].busy > 1 ? 1 : s[i].busy; /* NaN too */
        if (b->sample_end_ns) { /* the first sample only marks where the next one's period starts */
            if (b->periods_waiting == ALNAIR_DEVICE_BUSY_PERIODS) { /* the accounting stalled: the oldest goes */
                b->first_period = (b->first_period + 1) % ALNAIR_DEVICE_BUSY_PERIODS;
                b->periods_waiting--;
            }
            unsigned at = (b->first_period + b->periods_waiting++) % ALNAIR_DEVICE_BUSY_PERIODS;
            b->periods[at].start_ns = b->sample_end_ns, b->periods[at].end_ns = s[i].end_ns;
            b->periods[at].busy = busy;
        }
        if (b->sample_end_ns) { /* the first sample is of the time before: only a period's tells the recent part */
            double since = (double)(s[i].end_ns - b->sample_end_ns);
            double weight = b->busy_known ? 1 - exp(-since / ALNAIR_DEVICE_RECENT_NS) : 1;
            b->recent_busy += weight * (busy - b->recent_busy);
            b->busy_known = 1;
        }
        b->sample_end_ns = s[i].end_ns;
    }
    apply(b);
}

/* What the time since the latest period applied counts at: the latest scale; before the first period, whole, or
 * with `wait_first` nothing while a sample says that period is on its way. */
static double tail_scale(const struct alnair_device_busy *b, int wait_first)
{
    if (b->scaled_any) return alnair_device_busy_scale(b);
    int coming = b->sample_end_ns && (double)b->ticks[b->newest].ms * MS < (double)b->sample_end_ns + FIRST_PERIOD_NS;
    return wait_first && coming ? 0 : 1;
}

double alnair_device_busy_scaled(struct alnair_device_busy *b, int wait_first)
{
    if (!b->count) return 0;
    double own = b->ticks[b->newest].own;
    return b->scaled + (own > b->scaled_own ? own - b->scaled_own : 0) * tail_scale(b, wait_first);
}
