/*
 * turn_cases.c - drives intercept/turns.c as several threads of one process do, on a table whose other slot has
 * its turn taken, and prints the word this process would publish after each step:
 *
 *   turn_cases CASE
 *
 *   holders  launches a and b hold, drained; b goes, then a: "HOLDING" stays while either still holds
 *   budget   one launch after another holds for 100 ms (HOLD_MAX) each, the peer's turn taken all the while: the
 *            holds of one second stop at half of it; prints how many held and for how long in all
 *   drain    a launch holds before its queue is drained, then drained: only then does the word say HOLDING
 *   due      this process's turn comes due while the peer's is taken: its launch holds past the grace a release
 *            is kept for, ticks come, the peer's turn ends, and the launch goes
 * Each step prints "STEP wait W holding H changed C state S" (H: the word's HOLDING bit; S: its state, 1 due,
 * 2 taken).
 */
#include <stdio.h>
#include <string.h>

#include "turns.h"

#define MS 1000000ull

static struct alnair_share_table table;
static struct alnair_turn turn;
static const uint64_t peers = 1ull << 1; /* this process is slot 0; slot 1's turn is taken */

static void step(const char *name, struct alnair_turn_wait *w, uint64_t now, int go)
{
    int changed = 0, wait = 0;
    if (go) changed = alnair_turn_released(&turn, w, now);
    else wait = alnair_turn_gate(&turn, &table, now, w, &changed);
    uint32_t word = alnair_turn_word(&turn, 0);
    printf("%s wait %d holding %d changed %d state %u\n", name, wait, !!(word & ALNAIR_TURN_HOLDING), changed,
           word >> ALNAIR_TURN_STATE_SHIFT & 3);
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "holders";
    uint64_t now = 1000 * MS;
    table.busy[1] = (struct alnair_share_busy){.until_ms = 1000, .turn = ALNAIR_TURN_AWARE |
                                                                         ALNAIR_TURN_TAKEN << ALNAIR_TURN_STATE_SHIFT};
    alnair_turn_tick(&turn, now, 0, 1, 1, &table, peers); /* saturated, nothing owed: holds from now */
    if (!strcmp(c, "holders")) {
        struct alnair_turn_wait a = {now, 1, 0}, b = {now + MS, 1, 0};
        step("a-holds", &a, now, 0);
        step("b-holds", &b, now + MS, 0);
        step("b-goes", &b, now + 2 * MS, 1);
        step("a-goes", &a, now + 3 * MS, 1);
    } else if (!strcmp(c, "budget")) {
        uint64_t held = 0;
        int holds = 0;
        for (uint64_t at = now; at < now + 1000 * MS; at += 100 * MS) {
            struct alnair_turn_wait w = {at, 1, 0};
            int changed;
            if (!alnair_turn_gate(&turn, &table, at, &w, &changed)) continue;
            uint64_t end = at;
            while (alnair_turn_gate(&turn, &table, end, &w, &changed)) end += MS / 2; /* polls until let go */
            alnair_turn_released(&turn, &w, end);
            held += end - at, holds++;
        }
        printf("holds %d held_ms %llu\n", holds, (unsigned long long)(held / MS));
    } else if (!strcmp(c, "due")) {
        struct alnair_turn_wait w = {now + 2 * MS, 1, 0};
        alnair_turn_tick(&turn, now, now + 2 * MS, 1, 1, &table, peers); /* its limit releases it at +2 ms */
        step("holds", &w, now + 2 * MS, 0);
        alnair_turn_tick(&turn, now + 10 * MS, 0, 1, 1, &table, peers);
        step("held-10ms", &w, now + 10 * MS, 0);
        alnair_turn_tick(&turn, now + 20 * MS, 0, 1, 1, &table, peers);
        step("held-20ms", &w, now + 20 * MS, 0);
        table.busy[1].turn = ALNAIR_TURN_AWARE; /* the peer's turn is over */
        step("takes", &w, now + 25 * MS, 0);
        step("goes", &w, now + 25 * MS, 1);
    } else {
        struct alnair_turn_wait w = {now, 0, 0};
        step("waits", &w, now, 0);
        w.drained = 1;
        step("drained", &w, now + MS, 0);
        step("goes", &w, now + 2 * MS, 1);
    }
    return 0;
}
