/*
 * gpu_time.c - see gpu_time.h.
 *
 * Busy time is kept per millisecond of CLOCK_MONOTONIC (the host's clock, so every process
 * on the node numbers its milliseconds alike). A span's time goes into `pending` when a sync
 * ends it and, for a span still open, at every monitor tick; the tick then makes the ms before
 * now final (into `history`), publishes the last ALNAIR_SHARE_BUSY_MS of them in the share
 * table and, once the peers have published the same ms, adds each one to the totals divided
 * among the processes busy in it. Within a ms the processes' busy parts are taken as
 * independent: a ms where this process was busy 1.0 and one peer 0.5 counts 0.5 x 1 + 0.5 x 1/2.
 */
#include "gpu_time.h"

#include <string.h>

#define MS 1000000ull
#define WAIT_MS 30                /* a peer's timeline later than this (a tick is 10 ms) counts as idle */
#define GARBAGE_MS 1000           /* a timeline further ahead than this is no process's: ignored */
#define STALE_NS 1000000000ull    /* a span no call ends closes after a second without launches */

void alnair_gpu_time_init(struct alnair_gpu_time *g)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->lock, NULL);
}

void alnair_gpu_time_begin(struct alnair_gpu_time *g, uint64_t now)
{
    uint64_t idle = 0;
    atomic_compare_exchange_strong(&g->busy_since_ns, &idle, now ? now : 1);
}

/* Busy over [a, b) into the pending ms (lock held). The first span sets where the ms start. */
static void add_busy(struct alnair_gpu_time *g, uint64_t a, uint64_t b)
{
    if (!g->final_ms) g->final_ms = g->accounted_ms = a / MS;
    uint64_t floor = g->final_ms * MS, ceiling = (g->final_ms + ALNAIR_GPU_TIME_PENDING_MS) * MS;
    if (a < floor) a = floor;
    if (b > ceiling) b = ceiling; /* the monitor is that late: the newest is lost */
    for (uint64_t t = a; t < b;) {
        uint64_t m = t / MS, end = (m + 1) * MS < b ? (m + 1) * MS : b;
        uint32_t *ns = &g->pending[m % ALNAIR_GPU_TIME_PENDING_MS];
        *ns = *ns + (end - t) < MS ? *ns + (uint32_t)(end - t) : (uint32_t)MS;
        t = end;
    }
}

void alnair_gpu_time_end(struct alnair_gpu_time *g, uint64_t now)
{
    pthread_mutex_lock(&g->lock);
    uint64_t since = atomic_load(&g->busy_since_ns);
    if (since) {
        if (now > since) add_busy(g, since, now);
        atomic_store(&g->busy_since_ns, 0);
    }
    pthread_mutex_unlock(&g->lock);
}

static void add_total(struct alnair_gpu_time *g, uint32_t busy_ns, double share)
{
    double gpu = busy_ns * share + g->gpu_time_rest;
    uint64_t whole = (uint64_t)gpu;
    g->gpu_time_rest = gpu - (double)whole;
    atomic_fetch_add_explicit(&g->gpu_time_ns, whole, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->busy_ns, busy_ns, memory_order_relaxed);
}

/* The open span: counted up to now, or ended when launches stopped a second ago and no thread waits
 * for the GPU (a program that learns of its work's end only through calls not hooked). */
static void count_open_span(struct alnair_gpu_time *g, uint64_t now, uint64_t launches)
{
    if (launches != g->launches_seen) g->launches_seen = launches, g->launches_moved_ns = now;
    uint64_t since = atomic_load(&g->busy_since_ns);
    if (!since || now <= since) return;
    add_busy(g, since, now);
    int stale = now - g->launches_moved_ns >= STALE_NS && !atomic_load(&g->syncing);
    atomic_store(&g->busy_since_ns, stale ? 0 : now);
}

static uint8_t published_busy(uint32_t ns)
{
    return (uint8_t)(((uint64_t)ns * ALNAIR_SHARE_BUSY_FULL + MS - 1) / MS); /* any busy shows */
}

void alnair_gpu_time_close(struct alnair_gpu_time *g, uint64_t now, uint64_t launches, struct alnair_share_busy *mine)
{
    pthread_mutex_lock(&g->lock);
    count_open_span(g, now, launches);
    uint64_t now_ms = now / MS;
    for (; g->final_ms && g->final_ms < now_ms; g->final_ms++) {
        uint64_t m = g->final_ms;
        if (m - g->accounted_ms >= ALNAIR_GPU_TIME_HISTORY_MS) { /* ticks too far apart to wait for peers */
            add_total(g, g->history[g->accounted_ms % ALNAIR_GPU_TIME_HISTORY_MS], 1.0);
            g->accounted_ms++;
        }
        g->history[m % ALNAIR_GPU_TIME_HISTORY_MS] = g->pending[m % ALNAIR_GPU_TIME_PENDING_MS];
        g->pending[m % ALNAIR_GPU_TIME_PENDING_MS] = 0;
    }
    if (mine) {
        memset(mine, 0, sizeof *mine);
        mine->until_ms = g->final_ms;
        for (uint64_t m = g->final_ms > ALNAIR_SHARE_BUSY_MS ? g->final_ms - ALNAIR_SHARE_BUSY_MS : 0; m < g->final_ms; m++)
            mine->busy[m % ALNAIR_SHARE_BUSY_MS] = published_busy(g->history[m % ALNAIR_GPU_TIME_HISTORY_MS]);
    }
    pthread_mutex_unlock(&g->lock);
}

/* A peer's busy part of ms m: 0..1, or -1 when it has not published m yet and may still. */
static double peer_busy(const struct alnair_share_busy *b, uint64_t m, uint64_t now_ms)
{
    uint64_t until = b->until_ms;
    if (until > now_ms + GARBAGE_MS) return 0;
    if (m >= until) return m + WAIT_MS > now_ms ? -1 : 0;
    if (m + ALNAIR_SHARE_BUSY_MS < until) return 0; /* gone from its timeline: missed */
    uint8_t v = b->busy[m % ALNAIR_SHARE_BUSY_MS];
    return v >= ALNAIR_SHARE_BUSY_FULL ? 1.0 : v / (double)ALNAIR_SHARE_BUSY_FULL;
}

/* E[1 / (1 + K)], K the number of peers busy, each independently with its part of the ms. Returns -1 when
 * a peer's timeline is still to come. */
static double share_of_ms(const struct alnair_share_table *t, uint64_t peers, uint64_t m, uint64_t now_ms)
{
    double dist[ALNAIR_SHARE_SLOTS + 1] = {1.0};
    int n = 0;
    for (int slot = 0; slot < ALNAIR_SHARE_SLOTS; slot++) {
        if (!(peers >> slot & 1)) continue;
        double p = peer_busy(&t->busy[slot], m, now_ms);
        if (p < 0) return -1;
        if (p == 0) continue;
        n++;
        for (int k = n; k > 0; k--) dist[k] = dist[k] * (1 - p) + dist[k - 1] * p;
        dist[0] *= 1 - p;
    }
    double share = 0;
    for (int k = 0; k <= n; k++) share += dist[k] / (k + 1);
    return share;
}

void alnair_gpu_time_account(struct alnair_gpu_time *g, uint64_t now, const struct alnair_share_table *table,
                             uint64_t peers)
{
    pthread_mutex_lock(&g->lock);
    uint64_t now_ms = now / MS;
    for (; g->accounted_ms < g->final_ms; g->accounted_ms++) {
        uint32_t busy = g->history[g->accounted_ms % ALNAIR_GPU_TIME_HISTORY_MS];
        if (!busy) continue;
        double share = table && peers ? share_of_ms(table, peers, g->accounted_ms, now_ms) : 1.0;
        if (share < 0) break; /* a peer's timeline of this ms is still to come */
        add_total(g, busy, share);
    }
    pthread_mutex_unlock(&g->lock);
}
