/*
 * turns.h - a limited process's turn on a shared GPU: the turn word of its share-table slot (alnair_shm.h).
 *
 * Processes with work on one GPU share it in time slices, and every switch between them costs both: an H100's
 * ResNet-18 pair capped at 30/70 stepped at 26.8/66.5% of its rate alone while the caps held its GPU time at
 * 30/70 (docs/intercept.md, error 4). So a process that a limit held back takes a turn when it is released: the
 * others hold their launches from its release time, their queues drained, and it runs alone until its limit
 * makes it wait again or it has no more work; then they go on. One process's states:
 *
 *   none  -> due    a tick's decision bars its launches until t (published with t, so the others hold from t)
 *   due   -> taken  its first launch at or after t, if no other turn is taken; it waits for its busy peers to
 *                   hold, drained (at most DRAIN_MAX_NS), then goes
 *   taken -> due    a launch waits for its limit again, its queue drained (due at the wait's end)
 *   taken -> none   a tick finds it had no work, or the turn lasted TURN_MAX_NS
 *   due   -> none   nothing was launched within GRACE_NS of t; a launch holding for a peer's taken turn keeps
 *                   it due (released again at each tick), so a turn the peers' turns delay is not lost
 *
 * The table is hostile, so another slot's word counts only for slots the share table counts (a live owner), a
 * release long past or more than a second ahead counts for nothing, one hold lasts at most HOLD_MAX_NS, and holds
 * take at most half of each second (a busy process on a time-sliced GPU could take as much). Every function takes
 * the time: the simulation (tests/intercept/programs/gpu_time_sim.c) drives them as the library does.
 */
#ifndef ALNAIR_TURNS_H
#define ALNAIR_TURNS_H

#include <stdatomic.h>
#include <stdint.h>

#include "alnair_shm.h"

#define ALNAIR_TURN_POLL_NS 500000ull /* a waiting launch reads the table this often */

struct alnair_turn {
    _Atomic uint32_t state;        /* ALNAIR_TURN_DUE or _TAKEN (0: none) */
    _Atomic uint32_t holders;      /* launches holding, drained (any thread): the word says HOLDING while any do */
    _Atomic uint64_t release_ns;   /* due: when the limit releases its launches */
    _Atomic uint64_t since_ns;     /* taken: since when */
    _Atomic uint64_t hold_from_ns; /* the monitor's reading of the peers' turns: launches hold from then; 0: none */
    _Atomic uint64_t peers;        /* the slots that count (gpu_share.h), as the monitor last saw them */
    _Atomic uint64_t second_ns, held_ns; /* the holds of the second that began at second_ns */
};

/* The word this process publishes, its release counted from the start of ms until_ms (the timeline's). */
uint32_t alnair_turn_word(const struct alnair_turn *t, uint64_t until_ms);

/* Monitor tick at now, after the limits decided: launches wait until barred_until (0: nothing owed). worked: it
 * launched or had work on the GPU since the last tick; saturated: the GPU's samples said it ran work nearly all its
 * recent time and have not fallen under ALNAIR_DEVICE_TURNS_OFF since (device_busy.h); below, turns would only idle
 * it more. Then the peers' words, as read: hold_from_ns.
 * Returns 1 if this process's word changed (its state, or a due turn's release). */
int alnair_turn_tick(struct alnair_turn *t, uint64_t now_ns, uint64_t barred_until_ns, int worked, int saturated,
                     const struct alnair_share_table *table, uint64_t peers);

/* Whether launches must look at the turns: this process's turn is due, or a peer's makes it hold (the monitor then
 * routes every launch to alnair_turn_at_gate). */
int alnair_turn_pending(const struct alnair_turn *t);

/* A launch at now: whether it must read the table and ask alnair_turn_gate (its turn's release has come, or a
 * peer's turn may make it hold). */
int alnair_turn_at_gate(const struct alnair_turn *t, uint64_t now_ns);

/* A launch waits for the limit until release, its queue drained: the turn it had is over, the next one due.
 * Returns 1 if the word changed. */
int alnair_turn_end(struct alnair_turn *t, uint64_t release_ns);

/* One launch at the gate: when it began to wait there, whether its queue is drained (a hold drains it first; the
 * launch says so once it is), and whether it counts among the holders. Zeroed, then since_ns set, at each launch. */
struct alnair_turn_wait {
    uint64_t since_ns;
    int drained, holding;
};

/* A launch at now, the limit paid: 0 to go, 1 to wait and ask again after ALNAIR_TURN_POLL_NS (the table read
 * again). *changed: the word changed. */
int alnair_turn_gate(struct alnair_turn *t, const struct alnair_share_table *table, uint64_t now_ns,
                     struct alnair_turn_wait *w, int *changed);

/* The launch goes at now: what it held for others' turns counts against this second's budget, and it leaves the
 * holders. Returns 1 if the word changed. */
int alnair_turn_released(struct alnair_turn *t, struct alnair_turn_wait *w, uint64_t now_ns);

#endif
