/*
 * turns.c - see turns.h.
 */
#include "turns.h"

#define MS 1000000ull
#define GRACE_NS 5000000ull        /* a release not taken within this is dropped: its process had no work */
#define AHEAD_NS 1000000000ull     /* a release further ahead than a wait can last is no process's */
#define TURN_MAX_NS 100000000ull   /* a turn that no wait ends is over after this */
#define DRAIN_MAX_NS 100000000ull  /* a turn starts after this even if a busy peer never held (a deep queue) */
#define HOLD_MAX_NS 100000000ull   /* one launch holds for the others' turns at most this long */
#define SECOND_NS 1000000000ull
#define HOLD_BUDGET_NS (SECOND_NS / 2) /* and all of a process's launches at most this much of each second */
#define FRESH_MS 30                /* a timeline older than this says nothing of now (gpu_time.c's WAIT_MS) */
#define STATE 3u                   /* a word's state, shifted down */

/* Another slot's word: its state, and the release of a due turn as a time. */
struct peer_turn {
    uint32_t state;
    uint64_t release_ns;
};

static struct peer_turn peer_turn(const struct alnair_share_busy *b)
{
    struct peer_turn p = {b->turn >> ALNAIR_TURN_STATE_SHIFT & STATE, 0};
    p.release_ns = b->until_ms * MS + (uint64_t)(b->turn & ALNAIR_TURN_RELEASE_MASK) * 1000;
    return p;
}

/* A peer's due turn whose release is plausible and not long past, as the time it holds from; 0: none. */
static uint64_t due_at(struct peer_turn p, uint64_t now)
{
    if (p.state != ALNAIR_TURN_DUE || p.release_ns + GRACE_NS <= now || p.release_ns > now + AHEAD_NS) return 0;
    return p.release_ns ? p.release_ns : 1;
}

uint32_t alnair_turn_word(const struct alnair_turn *t, uint64_t until_ms)
{
    uint32_t state = atomic_load(&t->state), word = ALNAIR_TURN_AWARE | state << ALNAIR_TURN_STATE_SHIFT;
    if (atomic_load(&t->holders)) word |= ALNAIR_TURN_HOLDING;
    if (state == ALNAIR_TURN_DUE) {
        uint64_t release = atomic_load(&t->release_ns), from = until_ms * MS;
        uint64_t us = release > from ? (release - from) / 1000 : 0;
        word |= us < ALNAIR_TURN_RELEASE_MASK ? (uint32_t)us : ALNAIR_TURN_RELEASE_MASK;
    }
    return word;
}

/* The earliest time a peer's turn makes this process hold: now for a taken one, a due one's release. */
static uint64_t hold_from(const struct alnair_share_table *table, uint64_t peers, uint64_t now)
{
    uint64_t from = 0;
    for (int slot = 0; table && slot < ALNAIR_SHARE_SLOTS; slot++) {
        if (!(peers >> slot & 1)) continue;
        struct peer_turn p = peer_turn(&table->busy[slot]);
        uint64_t at = p.state == ALNAIR_TURN_TAKEN ? now : due_at(p, now);
        if (at && (!from || at < from)) from = at;
    }
    return from;
}

int alnair_turn_tick(struct alnair_turn *t, uint64_t now, uint64_t barred_until, int worked, int saturated,
                     const struct alnair_share_table *table, uint64_t peers)
{
    uint32_t state = atomic_load(&t->state);
    uint64_t release = atomic_load(&t->release_ns);
    if (!saturated) { /* the GPU idles part of its time: a turn would idle it more while the others hold */
        atomic_store(&t->state, 0);
    } else if (barred_until > now) {
        atomic_store(&t->release_ns, barred_until); /* taken: it stays so until a launch waits, drained */
        if (!state) atomic_store(&t->state, ALNAIR_TURN_DUE);
    } else if (state == ALNAIR_TURN_TAKEN && (!worked || now - atomic_load(&t->since_ns) >= TURN_MAX_NS)) {
        atomic_store(&t->state, 0);
    } else if (state == ALNAIR_TURN_DUE) {
        /* released now: the wait was cut short, or a launch holds for a peer's turn (it takes its own after) */
        if (release > now || atomic_load(&t->holders)) atomic_store(&t->release_ns, now);
        else if (now >= release + GRACE_NS) atomic_store(&t->state, 0);
    }
    atomic_store(&t->peers, peers);
    atomic_store(&t->hold_from_ns, atomic_load(&t->state) == ALNAIR_TURN_TAKEN ? 0 : hold_from(table, peers, now));
    return atomic_load(&t->state) != state || atomic_load(&t->release_ns) != release;
}

int alnair_turn_pending(const struct alnair_turn *t)
{
    return atomic_load(&t->state) == ALNAIR_TURN_DUE || atomic_load(&t->hold_from_ns);
}

int alnair_turn_at_gate(const struct alnair_turn *t, uint64_t now)
{
    uint64_t from = atomic_load(&t->hold_from_ns);
    if (atomic_load(&t->state) == ALNAIR_TURN_DUE && now >= atomic_load(&t->release_ns)) return 1;
    return from && now >= from;
}

int alnair_turn_end(struct alnair_turn *t, uint64_t release)
{
    if (atomic_load(&t->state) != ALNAIR_TURN_TAKEN) return 0;
    atomic_store(&t->release_ns, release);
    atomic_store(&t->state, ALNAIR_TURN_DUE);
    return 1;
}

/* While a turn is taken, a peer that the latest timeline shows busy, takes part in turns and has none of its own:
 * not holding yet. A due one drained its queue before it waited for its limit (and holds or takes its turn at its
 * next launch); one whose turn is taken at the same moment will not hold, and the two time-slice. */
static int peer_busy(const struct alnair_share_busy *b, uint64_t now)
{
    uint64_t now_ms = now / MS;
    if (!(b->turn & ALNAIR_TURN_AWARE) || (b->turn & ALNAIR_TURN_HOLDING) || !b->until_ms) return 0;
    if (peer_turn(b).state) return 0;
    if (b->until_ms + FRESH_MS < now_ms || b->until_ms > now_ms + 1000) return 0;
    return b->busy[(b->until_ms - 1) % ALNAIR_SHARE_BUSY_MS] > 0;
}

/* Whether a launch of a process not in its turn must hold now: a peer's turn is taken, or due and released. */
static int must_hold(const struct alnair_share_table *table, uint64_t peers, uint64_t now, int *taken)
{
    int hold = 0;
    *taken = 0;
    for (int slot = 0; table && slot < ALNAIR_SHARE_SLOTS; slot++) {
        if (!(peers >> slot & 1)) continue;
        struct peer_turn p = peer_turn(&table->busy[slot]);
        uint64_t due = due_at(p, now);
        if (p.state == ALNAIR_TURN_TAKEN) *taken = hold = 1;
        else if (due && due <= now) hold = 1;
    }
    return hold;
}

static int busy_peers(const struct alnair_share_table *table, uint64_t peers, uint64_t now)
{
    for (int slot = 0; table && slot < ALNAIR_SHARE_SLOTS; slot++)
        if ((peers >> slot & 1) && peer_busy(&table->busy[slot], now)) return 1;
    return 0;
}

/* Holds within this second's budget: the second begins again once it has passed. */
static int may_hold(struct alnair_turn *t, uint64_t now)
{
    if (now - atomic_load(&t->second_ns) >= SECOND_NS) atomic_store(&t->second_ns, now), atomic_store(&t->held_ns, 0);
    return atomic_load(&t->held_ns) < HOLD_BUDGET_NS;
}

/* A launch holds; once drained it counts among the holders (the first one changes the word). */
static int hold(struct alnair_turn *t, struct alnair_turn_wait *w, int *changed)
{
    if (w->drained && !w->holding) {
        w->holding = 1;
        *changed = atomic_fetch_add(&t->holders, 1) == 0;
    }
    return 1;
}

int alnair_turn_gate(struct alnair_turn *t, const struct alnair_share_table *table, uint64_t now,
                     struct alnair_turn_wait *w, int *changed)
{
    uint64_t peers = atomic_load(&t->peers), from = atomic_load(&t->hold_from_ns);
    uint32_t state = atomic_load(&t->state);
    int taken = 0, held_long = now - w->since_ns >= HOLD_MAX_NS;
    *changed = 0;
    if (state == ALNAIR_TURN_DUE && now >= atomic_load(&t->release_ns)) {
        if (must_hold(table, peers, now, &taken) && taken && !held_long && may_hold(t, now))
            return hold(t, w, changed);
        atomic_store(&t->since_ns, now);
        atomic_store(&t->state, ALNAIR_TURN_TAKEN);
        *changed = 1;
        state = ALNAIR_TURN_TAKEN;
    }
    if (state == ALNAIR_TURN_TAKEN) /* its turn: once the busy peers hold, drained */
        return now - atomic_load(&t->since_ns) < DRAIN_MAX_NS && busy_peers(table, peers, now);
    if (!from || now < from || held_long || !may_hold(t, now) || !must_hold(table, peers, now, &taken)) return 0;
    return hold(t, w, changed);
}

int alnair_turn_released(struct alnair_turn *t, struct alnair_turn_wait *w, uint64_t now)
{
    if (!w->holding) return 0;
    w->holding = 0;
    atomic_fetch_add(&t->held_ns, now - w->since_ns);
    return atomic_fetch_sub(&t->holders, 1) == 1;
}
