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

#include <math.h>
#include <string.h>

#define MS 1000000ull
#define WAIT_MS 30                /* a peer's timeline later than this (a tick is 10 ms) counts as idle */
#define GARBAGE_MS 1000           /* a timeline further ahead than this is no process's: ignored */
#define STALE_NS 1000000000ull    /* a span no call ends closes after a second without launches */
#define CAP_CREDIT_NS 100000000.0   /* a capped process may run ahead by its cap's part of 100 ms */
#define SHARE_CREDIT_NS 50000000.0  /* a process that wanted less than its share banks at most 50 ms */
#define MAX_WAIT_NS 1000000000.0    /* a wait is decided again every tick anyway */
#define MIN_RATE 0.05               /* a share's debt is paid back at least this fast (the rest's floor) */

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

/* Time over [a, b) into pending ms (`pending` or `turn_pending`; lock held). The first span sets where the ms start. */
static void add_time(struct alnair_gpu_time *g, uint32_t *pending, uint64_t a, uint64_t b)
{
    if (!g->final_ms) g->final_ms = g->accounted_ms = a / MS;
    uint64_t floor = g->final_ms * MS, ceiling = (g->final_ms + ALNAIR_GPU_TIME_PENDING_MS) * MS;
    if (a < floor) a = floor;
    if (b > ceiling) b = ceiling; /* the monitor is that late: the newest is lost */
    for (uint64_t t = a; t < b;) {
        uint64_t m = t / MS, end = (m + 1) * MS < b ? (m + 1) * MS : b;
        uint32_t *ns = &pending[m % ALNAIR_GPU_TIME_PENDING_MS];
        *ns = *ns + (end - t) < MS ? *ns + (uint32_t)(end - t) : (uint32_t)MS;
        t = end;
    }
}

void alnair_gpu_time_end(struct alnair_gpu_time *g, uint64_t now)
{
    pthread_mutex_lock(&g->lock);
    uint64_t since = atomic_load(&g->busy_since_ns);
    if (since) {
        if (now > since) add_time(g, g->pending, since, now);
        atomic_store(&g->busy_since_ns, 0);
    }
    pthread_mutex_unlock(&g->lock);
}

/* The turn running, up to now, into turn_pending (lock held); it goes on from now, or ends. */
static void count_turn(struct alnair_gpu_time *g, uint64_t now, int ends)
{
    uint64_t since = atomic_load(&g->turn_since_ns);
    if (!since) return;
    if (now > since) add_time(g, g->turn_pending, since, now);
    atomic_store(&g->turn_since_ns, ends ? 0 : now > since ? now : since);
}

void alnair_gpu_time_turn(struct alnair_gpu_time *g, int taken, uint64_t now)
{
    if (taken == (atomic_load(&g->turn_since_ns) != 0)) return;
    pthread_mutex_lock(&g->lock);
    if (!taken) count_turn(g, now, 1);
    else if (!atomic_load(&g->turn_since_ns)) atomic_store(&g->turn_since_ns, now ? now : 1);
    pthread_mutex_unlock(&g->lock);
}

static void add_total(struct alnair_gpu_time *g, uint32_t busy_ns, double share)
{
    g->divided_ns += busy_ns * share;
    atomic_fetch_add_explicit(&g->busy_ns, busy_ns, memory_order_relaxed);
}

/* The open span: counted up to now, or ended when launches stopped a second ago and no thread waits
 * for the GPU (a program that learns of its work's end only through calls not hooked). */
static void count_open_span(struct alnair_gpu_time *g, uint64_t now, uint64_t launches)
{
    if (launches != g->launches_seen) g->launches_seen = launches, g->launches_moved_ns = now;
    uint64_t since = atomic_load(&g->busy_since_ns);
    if (!since || now <= since) return;
    add_time(g, g->pending, since, now);
    int stale = now - g->launches_moved_ns >= STALE_NS && !atomic_load(&g->syncing);
    atomic_store(&g->busy_since_ns, stale ? 0 : now);
}

static uint8_t published_busy(uint32_t ns)
{
    return (uint8_t)(((uint64_t)ns * ALNAIR_SHARE_BUSY_FULL + MS - 1) / MS); /* any busy shows */
}

static int wanted(const struct alnair_gpu_time *g, uint64_t m) { return g->wanting >> (m % ALNAIR_GPU_TIME_HISTORY_MS) & 1; }

static void publish(const struct alnair_gpu_time *g, struct alnair_share_busy *mine)
{
    memset(mine, 0, sizeof *mine);
    mine->until_ms = g->final_ms;
    mine->share_ppm = g->share_ppm;
    for (uint64_t m = g->final_ms > ALNAIR_SHARE_BUSY_MS ? g->final_ms - ALNAIR_SHARE_BUSY_MS : 0; m < g->final_ms; m++) {
        mine->busy[m % ALNAIR_SHARE_BUSY_MS] = published_busy(g->history[m % ALNAIR_GPU_TIME_HISTORY_MS]);
        if (wanted(g, m)) mine->wanting |= 1ull << (m % ALNAIR_SHARE_BUSY_MS);
    }
}

void alnair_gpu_time_close(struct alnair_gpu_time *g, uint64_t now, uint64_t launches, struct alnair_share_busy *mine)
{
    pthread_mutex_lock(&g->lock);
    count_open_span(g, now, launches);
    count_turn(g, now, 0);
    /* a launch that waited for the limit wanted the GPU all the while (the tick's ms all count) */
    int waited = atomic_exchange(&g->gate_waited, 0) || atomic_load(&g->gate_waiting) > 0;
    uint64_t now_ms = now / MS;
    for (; g->final_ms && g->final_ms < now_ms; g->final_ms++) {
        uint64_t m = g->final_ms, bit = 1ull << (m % ALNAIR_GPU_TIME_HISTORY_MS);
        if (m - g->accounted_ms >= ALNAIR_GPU_TIME_HISTORY_MS) { /* ticks too far apart to wait for peers */
            uint32_t busy = g->history[g->accounted_ms % ALNAIR_GPU_TIME_HISTORY_MS];
            add_total(g, busy, 1.0);
            g->all_ns += busy;
            g->accounted_ms++;
        }
        uint32_t busy = g->history[m % ALNAIR_GPU_TIME_HISTORY_MS] = g->pending[m % ALNAIR_GPU_TIME_PENDING_MS];
        g->pending[m % ALNAIR_GPU_TIME_PENDING_MS] = 0;
        g->turn_history[m % ALNAIR_GPU_TIME_HISTORY_MS] = g->turn_pending[m % ALNAIR_GPU_TIME_PENDING_MS];
        g->turn_pending[m % ALNAIR_GPU_TIME_PENDING_MS] = 0;
        g->wanting = busy || waited ? g->wanting | bit : g->wanting & ~bit;
    }
    if (mine) publish(g, mine);
    pthread_mutex_unlock(&g->lock);
}

/* What a peer's timeline says of ms m. */
struct peer_ms {
    double busy;        /* 0..1; -1: not published yet, and it may still be */
    int wants;
    uint32_t share_ppm;
};

static struct peer_ms peer_at(const struct alnair_share_busy *b, uint64_t m, uint64_t now_ms)
{
    struct peer_ms p = {0, 0, 0};
    uint64_t until = b->until_ms;
    if (until > now_ms + GARBAGE_MS) return p;
    if (m >= until) {
        if (m + WAIT_MS > now_ms) p.busy = -1;
        return p;
    }
    if (m + ALNAIR_SHARE_BUSY_MS < until) return p; /* gone from its timeline: missed */
    uint8_t v = b->busy[m % ALNAIR_SHARE_BUSY_MS];
    p.busy = v >= ALNAIR_SHARE_BUSY_FULL ? 1.0 : v / (double)ALNAIR_SHARE_BUSY_FULL;
    p.wants = b->wanting >> (m % ALNAIR_SHARE_BUSY_MS) & 1;
    p.share_ppm = b->share_ppm <= 1000000u ? b->share_ppm : 1000000u;
    return p;
}

/* The peers' view of ms m, in peers[0 .. n); returns n, or -1 when a timeline is still to come. */
static int peers_at(const struct alnair_share_table *t, uint64_t mask, uint64_t m, uint64_t now_ms,
                    struct peer_ms peers[ALNAIR_SHARE_SLOTS])
{
    int n = 0;
    for (int slot = 0; slot < ALNAIR_SHARE_SLOTS; slot++) {
        if (!(mask >> slot & 1)) continue;
        peers[n] = peer_at(&t->busy[slot], m, now_ms);
        if (peers[n].busy < 0) return -1;
        n++;
    }
    return n;
}

/* E[1 / (1 + K)], K the number of peers busy, each independently with its part of the ms. */
static double share_of_ms(const struct peer_ms *peers, int n)
{
    double dist[ALNAIR_SHARE_SLOTS + 1] = {1.0};
    int busy = 0;
    for (int i = 0; i < n; i++) {
        double p = peers[i].busy;
        if (p == 0) continue;
        busy++;
        for (int k = busy; k > 0; k--) dist[k] = dist[k] * (1 - p) + dist[k - 1] * p;
        dist[0] *= 1 - p;
    }
    double share = 0;
    for (int k = 0; k <= busy; k++) share += dist[k] / (k + 1);
    return share;
}

/* This process's weight among those wanting the GPU (it included): its share, or an equal part of what the
 * shares leave; *any_share (if not NULL) says if one of them has a share. Returns its part of the whole, 0..1. */
static double entitlement(uint32_t own_share, const struct peer_ms *peers, int n, int *any_share)
{
    uint64_t shares = own_share, without = !own_share;
    for (int i = 0; i < n; i++)
        if (peers[i].wants) shares += peers[i].share_ppm, without += !peers[i].share_ppm;
    if (any_share) *any_share = shares > 0;
    uint64_t left = shares < 1000000u ? 1000000u - shares : 0, rest = without ? left / without : 0;
    if (without && rest < ALNAIR_SHARE_REST_FLOOR_PPM) rest = ALNAIR_SHARE_REST_FLOOR_PPM;
    double total = (double)(shares + without * rest);
    return (own_share ? own_share : rest) / total;
}

static int any_wants(const struct peer_ms *peers, int n)
{
    for (int i = 0; i < n; i++)
        if (peers[i].wants) return 1;
    return 0;
}

/* One final ms into the totals and the tick; -1 if a peer's timeline of it is still to come. */
static int account_ms(struct alnair_gpu_time *g, uint64_t m, uint64_t now_ms, const struct alnair_share_table *t,
                      uint64_t mask, struct alnair_gpu_time_tick *tick)
{
    uint32_t busy = g->history[m % ALNAIR_GPU_TIME_HISTORY_MS];
    struct peer_ms peers[ALNAIR_SHARE_SLOTS];
    int n = t && mask ? peers_at(t, mask, m, now_ms, peers) : 0;
    if (n < 0) return -1;
    double idle = 1 - busy / (double)MS;
    for (int i = 0; i < n; i++) idle *= 1 - peers[i].busy;
    g->all_ns += (1 - idle) * MS;
    int contested = any_wants(peers, n);
    /* in its turn the peers wait: what the GPU did not run of that time (at the latest scale) was kept from them */
    double turn = g->turn_history[m % ALNAIR_GPU_TIME_HISTORY_MS];
    if (turn && contested) tick->turn_idle_ns += fmax(turn - (1 - idle) * MS * alnair_device_busy_scale(&g->device), 0);
    if (!busy && !wanted(g, m)) return 0;
    double share = share_of_ms(peers, n), used = busy * share;
    if (busy) add_total(g, busy, share), g->last_share = share;
    tick->used_ns += used;
    if (contested) /* entitled to its weight's part of what the GPU delivered */
        tick->excess_ns += used - (1 - idle) * MS * entitlement(g->share_ppm, peers, n, NULL);
    return 0;
}

/* The peers' latest published ms: whether one runs work on the GPU now, as far as this process can know (one
 * that only waits to launch would not use what this process leaves), and this process's part were it to want it. */
static void latest(struct alnair_gpu_time *g, uint64_t now_ms, const struct alnair_share_table *t, uint64_t mask,
                   struct alnair_gpu_time_tick *tick)
{
    struct peer_ms peers[ALNAIR_SHARE_SLOTS];
    int n = 0;
    for (int slot = 0; t && slot < ALNAIR_SHARE_SLOTS; slot++) {
        uint64_t until = t->busy[slot].until_ms;
        if (!(mask >> slot & 1) || !until || until + WAIT_MS < now_ms) continue;
        peers[n] = peer_at(&t->busy[slot], until - 1, now_ms);
        n += peers[n].busy >= 0;
    }
    for (int i = 0; i < n; i++) tick->contested |= peers[i].busy > 0;
    tick->entitled = entitlement(g->share_ppm, peers, n, &tick->shares);
}

/* The totals scaled to the GPU's busy time, and the tick's figures with them (the GPU time published never falls).
 * The tick's ms count at the latest scale; the scaled total takes each sample period's own once the samples
 * for it come, up to 0.3 s later: the difference is the tick's correction, so that the debts add up to what is
 * published (charged at the latest scale alone, a capped ResNet-18 published 33.9% under a 30% cap on an H100). */
static void scale(struct alnair_gpu_time *g, struct alnair_gpu_time_tick *tick, const struct alnair_busy_sample *samples,
                  int n_samples)
{
    alnair_device_busy_counted(&g->device, g->accounted_ms, g->all_ns, g->divided_ns);
    if (n_samples) alnair_device_busy_sampled(&g->device, samples, n_samples);
    uint64_t counted = (uint64_t)(alnair_device_busy_scaled(&g->device, 1) + 0.5);
    if (counted > atomic_load_explicit(&g->gpu_time_ns, memory_order_relaxed))
        atomic_store_explicit(&g->gpu_time_ns, counted, memory_order_relaxed);
    double by = alnair_device_busy_scale(&g->device), scaled = alnair_device_busy_scaled(&g->device, 0);
    tick->used_ns *= by, tick->excess_ns *= by, tick->unaccounted_ns *= by;
    /* the limits take the time before the first period whole (published, it waits for that period: two caps
     * charged its lump together would wait it out at once, the GPU idle 0.3 s in the simulation) */
    tick->corrected_ns = fmax(scaled - g->charged_ns, 0) - tick->used_ns;
    g->charged_ns = fmax(g->charged_ns, scaled);
    tick->saturated = alnair_device_busy_saturated(&g->device);
    if (tick->saturated) g->turns_on = 1;
    else if (alnair_device_busy_under(&g->device, ALNAIR_DEVICE_TURNS_OFF)) g->turns_on = 0;
    tick->turns = g->device.busy_known && g->turns_on;
}

struct alnair_gpu_time_tick alnair_gpu_time_account(struct alnair_gpu_time *g, uint64_t now,
                                                    const struct alnair_share_table *table, uint64_t peers,
                                                    const struct alnair_busy_sample *samples, int n_samples)
{
    struct alnair_gpu_time_tick tick = {0};
    pthread_mutex_lock(&g->lock);
    uint64_t now_ms = now / MS;
    if (!g->last_share) g->last_share = 1.0;
    for (; g->accounted_ms < g->final_ms; g->accounted_ms++, tick.ms++)
        if (account_ms(g, g->accounted_ms, now_ms, table, peers, &tick) < 0) break; /* a peer's ms is to come */
    double unaccounted = g->final_ms ? g->pending[g->final_ms % ALNAIR_GPU_TIME_PENDING_MS] : 0;
    for (uint64_t m = g->accounted_ms; m < g->final_ms; m++) unaccounted += g->history[m % ALNAIR_GPU_TIME_HISTORY_MS];
    tick.unaccounted_ns = unaccounted * g->last_share;
    scale(g, &tick, samples, n_samples);
    latest(g, now_ms, table, peers, &tick);
    pthread_mutex_unlock(&g->lock);
    return tick;
}

double alnair_gpu_time_owed(struct alnair_gpu_debts *debts, uint32_t cap_percent, const struct alnair_gpu_time_tick *t)
{
    double wait = 0;
    if (cap_percent && cap_percent < 100) {
        double cap = cap_percent / 100.0;
        /* the credit is what time passing banks; a correction is of time already charged, so it counts whole */
        double charged = t->used_ns + t->turn_idle_ns;
        debts->cap_ns = fmax(debts->cap_ns + charged - cap * (double)t->ms * MS, -cap * CAP_CREDIT_NS) + t->corrected_ns;
        double owed = debts->cap_ns + t->unaccounted_ns;
        if (owed > 0) wait = owed / cap; /* what using nothing pays back at the cap's rate */
    }
    /* A GPU that idled part of its recent time kept no process's work waiting: no share is owed. Holding
     * a process back then would only idle the GPU more (two launch-bound loops throttled each other by turns). */
    if (!t->saturated) debts->share_ns = fmin(debts->share_ns, 0);
    else debts->share_ns = fmax(debts->share_ns + t->excess_ns, -SHARE_CREDIT_NS);
    /* only while another process wants the GPU now: a share never holds it idle */
    if (t->contested && t->shares && debts->share_ns > 0) wait = fmax(wait, debts->share_ns / fmax(t->entitled, MIN_RATE));
    return fmin(wait, MAX_WAIT_NS);
}
