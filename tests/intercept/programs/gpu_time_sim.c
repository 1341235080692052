/*
 * gpu_time_sim.c - TEST DOUBLE of a time-sliced GPU and the processes sharing it, on a virtual
 * clock, driving intercept/gpu_time.c exactly as the library does: a launch onto an idle queue
 * begins a busy span, a sync's return ends it, a launch waits while its process owes GPU time to
 * a limit, and every process's monitor ticks every 10 ms, publishing its busy timeline into one
 * share table, accounting from the others' and deciding its limits' waits (as compute_limit.c).
 * A launch the limit lets go passes the turns' gate (turns.c) as compute_limit.c's does: it holds
 * while a peer's turn runs, reading the table every 0.5 ms, and its word goes into the table at once.
 * Nothing depends on the machine's speed: the same arguments give the same numbers.
 *
 *   gpu_time_sim [--no-device-busy] [--no-turns] [--switch-us N] [--slice-us N] [--samples-early-us N] [--samples-late-ms N]
 *                [--report-ms N] [--warm-up MS:LAUNCH_US] SECONDS PROC ...
 *   PROC = [cap=N,][share=N,]kernels:kernel_us:launch_us:cpu_us[:on_ms:off_ms[:start_ms]]
 *
 * A process repeats steps: `kernels` launches `launch_us` of CPU apart, each queueing
 * `kernel_us` of GPU work, then a sync that waits for its queue to drain, then `cpu_us` of CPU
 * (the data loader, the optimizer's host side). With on_ms/off_ms it steps for on_ms, then
 * idles for off_ms, and so on; start_ms delays its first step. The GPU runs one process's work
 * at a time, in turns of 2 ms (--slice-us) among those with work queued, as the H200 was measured to
 * (docs/intercept.md). Prints, per process, its steps, the GPU time it really got (also while the
 * first process steps and while it idles), what gpu_time.c measured and how long its launches
 * waited for its limit and held for others' turns, what its cap charged of its turns' idle time, and how many turns
 * it ran and their median length (from its launches' going to its next wait, as a trace reads the words); then the time
 * the GPU was busy and how long the first process stepped. --no-turns: the library before turns. The GPU's busy
 * samples come as NVML's do: whole percents of 1/6 s periods, each seen 50 ms after its
 * end, and first the driver's latest sample, of the idle GPU before, seen at once as the NVML thread's
 * first read finds it (--no-device-busy: none, as without NVML or on a MIG instance). --switch-us: a slice's end that switches
 * from a process still with work queued to another keeps the GPU busy N us for neither (the H200's ~0.15 ms a
 * switch between two busy processes; NVML counts it busy). --slice-us: the time slice (an operator may lengthen the
 * GPU's: `nvidia-smi compute-policy --set-timeslice`). --samples-early-us: each sample is stamped N us before the
 * end of the time it measured (a driver whose stamps and the host's clock disagree): a period that starts or ends
 * beside an idle spell then tells less or more than the processes' busy time in it. --samples-late-ms: samples are
 * seen N ms after their end instead of 50 (an H100's come every 200 ms and are read every 500 ms: up to 700).
 * --report-ms: every N ms also prints "at MS process I gpu_time_ns G true_ns T", what each process has published and
 * really got so far, as a check that reads the record before and after a stepping spell sees it.
 * --warm-up: for the run's first MS ms every process launches LAUNCH_US apart, a warm-up of another shape than its
 * steps (cuDNN's autotuning, the first allocations): the GPU busy part of its busy time differs from the steps'.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_time.h"
#include "turns.h"

#define DT_NS 10000ull       /* the simulation's resolution: 10 us */
#define TICK_NS 10000000ull  /* the monitor's period */
#define MAX_PROCS 8
#define MAX_TURNS 4096
#define SAMPLE_NS 166670000ull /* NVML's utilization period */
#define MAX_SAMPLES 4096

enum phase { THINKING, LAUNCHING, SYNCING };

struct proc {
    uint64_t kernels, kernel_ns, launch_ns, cpu_ns, on_ns, off_ns, start_ns; /* what it runs */
    enum phase phase;
    uint64_t next_ns;    /* when its CPU is done with what it does now */
    uint64_t launched;   /* launches of this step so far */
    uint64_t queued_ns;  /* its work on the GPU not yet run */
    uint64_t served_ns;  /* the GPU time it got */
    uint64_t steps, launches, tick_ns;
    uint32_t cap_percent;
    uint64_t barred_until_ns, waited_ns, held_ns; /* its launches waited for its limit, and for others' turns */
    uint64_t served_first_on_ns; /* of served_ns, while the first process was in its on_ms */
    struct alnair_gpu_debts debts;
    struct alnair_gpu_time g;
    struct alnair_turn turn;
    struct alnair_turn_wait wait; /* a launch waiting for turns (since_ns 0: none) */
    uint64_t poll_at;             /* when it reads the table again */
    uint64_t launches_ticked;        /* the launch count at the last tick */
    double turn_idle_ns;             /* what its cap charged of its turns' idle time */
    int in_turn;                     /* its turn runs (note_turn's `running`) since turn_from_ns */
    uint64_t turn_from_ns, turns, turn_us[MAX_TURNS]; /* its turns, and each one's length (the first MAX_TURNS) */
};

static struct proc procs[MAX_PROCS];
static int n_procs;
static struct alnair_share_table table;
static struct alnair_busy_sample samples[MAX_SAMPLES];
static int n_samples, sampling = 1;
static uint64_t switch_ns; /* --switch-us */
static uint64_t slice_ns = 2000000ull; /* --slice-us: a time slice */
static uint64_t early_ns;  /* --samples-early-us */
static uint64_t sample_lag_ns = 50000000ull; /* --samples-late-ms */
static uint64_t report_ns;                     /* --report-ms (0: none) */
static uint64_t warm_until_ns, warm_launch_ns;  /* --warm-up */
static int turns = 1; /* --no-turns: the library without its turns (to 70fe0b7) */

/* A process's turn word goes into its slot at once, as the library's pwrite does. */
static void publish_turn(int i) { table.busy[i].turn = alnair_turn_word(&procs[i].turn, table.busy[i].until_ms); }

static uint64_t peers_of(int i) { return ((1ull << n_procs) - 1) & ~(1ull << i); }

/* The GPU time follows the turn's state, as compute_limit.c's note_turn. */
static void note_turn(struct proc *p, uint64_t t)
{
    int running = atomic_load(&p->turn.state) == ALNAIR_TURN_TAKEN && !atomic_load(&p->g.gate_waiting);
    alnair_gpu_time_turn(&p->g, running, t);
    if (running && !p->in_turn) p->turn_from_ns = t;
    if (!running && p->in_turn && p->turns < MAX_TURNS) p->turn_us[p->turns] = (t - p->turn_from_ns) / 1000;
    if (!running && p->in_turn) p->turns++;
    p->in_turn = running;
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The median length of a process's turns (us; 0: none). */
static uint64_t median_turn_us(struct proc *p)
{
    size_t n = p->turns < MAX_TURNS ? p->turns : MAX_TURNS;
    qsort(p->turn_us, n, sizeof p->turn_us[0], by_value);
    return n ? p->turn_us[n / 2] : 0;
}

/* A launch the limit lets go, at the turns' gate (compute_limit.c's loop): 1 while it waits there. */
static int turn_waits(struct proc *p, uint64_t t)
{
    if (!turns || (!p->wait.since_ns && !alnair_turn_at_gate(&p->turn, t))) return 0;
    if (p->wait.since_ns && t < p->poll_at) return 1; /* between its reads of the table */
    if (!p->wait.since_ns) p->wait = (struct alnair_turn_wait){t, 0, 0};
    p->wait.drained = !p->queued_ns;
    int changed, wait = alnair_turn_gate(&p->turn, &table, t, &p->wait, &changed);
    if (!wait) changed |= alnair_turn_released(&p->turn, &p->wait, t), p->wait.since_ns = 0;
    if (changed) publish_turn((int)(p - procs));
    p->poll_at = t + ALNAIR_TURN_POLL_NS;
    return wait;
}

/* The samples a monitor ticking at t sees (NVML's newest ones are always some way behind). */
static int samples_seen(uint64_t t)
{
    int n = n_samples > 0; /* the first, seen at once */
    while (n < n_samples && samples[n].end_ns + sample_lag_ns <= t) n++;
    return n;
}

static void parse(struct proc *p, const char *spec, int index)
{
    unsigned long long v[7] = {0, 0, 0, 0, 0, 0, 0};
    unsigned cap = 0, share = 0;
    for (;;) {
        if (sscanf(spec, "cap=%u,", &cap) == 1 || sscanf(spec, "share=%u,", &share) == 1) spec = strchr(spec, ',') + 1;
        else break;
    }
    int n = sscanf(spec, "%llu:%llu:%llu:%llu:%llu:%llu:%llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]);
    if (n != 4 && n != 6 && n != 7) {
        fprintf(stderr, "gpu_time_sim: bad process %s\n", spec);
        exit(2);
    }
    *p = (struct proc){.kernels = v[0], .kernel_ns = v[1] * 1000, .launch_ns = v[2] * 1000, .cpu_ns = v[3] * 1000,
                       .on_ns = v[4] * 1000000, .off_ns = v[5] * 1000000, .start_ns = v[6] * 1000000};
    alnair_gpu_time_init(&p->g);
    p->next_ns = p->start_ns;
    p->cap_percent = cap;
    p->g.share_ppm = share * 10000;
    p->tick_ns = 1000000000ull + (uint64_t)index * 3300000ull; /* the monitors' ticks fall apart */
}

/* Outside its on_ms, a process starts no step. */
static int stepping(const struct proc *p, uint64_t t)
{
    if (t < p->start_ns) return 0;
    return !p->on_ns || (t - p->start_ns) % (p->on_ns + p->off_ns) < p->on_ns;
}

/* What each process has published and really got `ns` into the run (--report-ms). */
static void report(uint64_t ns)
{
    for (int i = 0; i < n_procs; i++)
        printf("at %llu process %d gpu_time_ns %llu true_ns %llu\n", (unsigned long long)(ns / 1000000), i,
               (unsigned long long)atomic_load(&procs[i].g.gpu_time_ns), (unsigned long long)procs[i].served_ns);
}

/* The virtual clock starts at 1 s: the ms numbering of the table has no zero ms. */
static void run_cpu(struct proc *p, uint64_t t)
{
    for (;;) {
        if (p->phase == THINKING) {
            if (t < p->next_ns || !stepping(p, t)) return;
            p->phase = LAUNCHING, p->launched = 0, p->next_ns = t;
        } else if (p->phase == LAUNCHING) {
            if (t < p->next_ns) return;
            int owed = t < p->barred_until_ns, waits = owed || turn_waits(p, t);
            atomic_store(&p->g.gate_waiting, waits);
            if (waits) { /* the launch waits while a debt is owed, or for turns; its queue drained first */
                atomic_store(&p->g.gate_waited, 1);
                if (!p->queued_ns && alnair_gpu_time_busy(&p->g)) alnair_gpu_time_end(&p->g, t);
                if (owed && !p->queued_ns && alnair_turn_end(&p->turn, p->barred_until_ns)) publish_turn((int)(p - procs));
                note_turn(p, t);
                if (owed) p->waited_ns += DT_NS;
                else p->held_ns += DT_NS;
                return;
            }
            note_turn(p, t);
            p->queued_ns += p->kernel_ns;
            p->launches++;
            if (!alnair_gpu_time_busy(&p->g)) alnair_gpu_time_begin(&p->g, t);
            p->next_ns += t < warm_until_ns ? warm_launch_ns : p->launch_ns;
            if (++p->launched == p->kernels) p->phase = SYNCING;
        } else {
            if (p->queued_ns) return;
            alnair_gpu_time_end(&p->g, t);
            p->steps++;
            p->phase = THINKING, p->next_ns = t + p->cpu_ns;
        }
    }
}

static void tick(int i, uint64_t t)
{
    struct proc *p = &procs[i];
    if (t < p->tick_ns) return;
    p->tick_ns += TICK_NS;
    alnair_gpu_time_close(&p->g, t, p->launches, &table.busy[i]);
    publish_turn(i);
    struct alnair_gpu_time_tick result = alnair_gpu_time_account(&p->g, t, &table, peers_of(i), samples, samples_seen(t));
    double wait = alnair_gpu_time_owed(&p->debts, p->cap_percent, &result);
    if (p->cap_percent) p->turn_idle_ns += result.turn_idle_ns;
    p->barred_until_ns = wait > 0 ? t + (uint64_t)wait : 0;
    if (!turns) return;
    int worked = p->launches != p->launches_ticked || p->queued_ns || atomic_load(&p->g.gate_waiting);
    p->launches_ticked = p->launches;
    if (alnair_turn_tick(&p->turn, t, p->barred_until_ns, worked, result.turns, &table, peers_of(i)))
        publish_turn(i);
    note_turn(p, t);
}

int main(int argc, char **argv)
{
    for (;;) { /* the options, in any order */
        if (argc > 1 && !strcmp(argv[1], "--no-device-busy")) {
            sampling = 0, argc--, argv++;
            continue;
        }
        if (argc > 1 && !strcmp(argv[1], "--no-turns")) {
            turns = 0, argc--, argv++;
            continue;
        }
        if (argc < 3) break;
        unsigned long long warm_ms, warm_us;
        if (!strcmp(argv[1], "--warm-up") && sscanf(argv[2], "%llu:%llu", &warm_ms, &warm_us) == 2) {
            warm_until_ns = warm_ms * 1000000, warm_launch_ns = warm_us * 1000, argc -= 2, argv += 2;
            continue;
        }
        unsigned long long value = strtoull(argv[2], NULL, 10);
        if (!strcmp(argv[1], "--switch-us")) switch_ns = value * 1000;
        else if (!strcmp(argv[1], "--slice-us") && value) slice_ns = value * 1000;
        else if (!strcmp(argv[1], "--samples-early-us")) early_ns = value * 1000;
        else if (!strcmp(argv[1], "--samples-late-ms")) sample_lag_ns = value * 1000000;
        else if (!strcmp(argv[1], "--report-ms")) report_ns = value * 1000000;
        else break;
        argc -= 2, argv += 2;
    }
    if (argc < 3 || argc - 2 > MAX_PROCS) {
        fprintf(stderr, "usage: gpu_time_sim [--no-device-busy] [--no-turns] [--switch-us N] [--slice-us N] [--samples-early-us N] [--samples-late-ms N]"
                        " [--report-ms N] [--warm-up MS:LAUNCH_US] SECONDS PROC [PROC ...] (at most %d)\n", MAX_PROCS);
        return 2;
    }
    uint64_t start = 1000000000ull, end = start + (uint64_t)(atof(argv[1]) * 1e9), device_busy = 0, slice_used = 0;
    uint64_t first_on_ns = 0, sample_busy = 0, sample_end = start + SAMPLE_NS;
    if (warm_until_ns) warm_until_ns += start;
    n_procs = argc - 2;
    for (int i = 0; i < n_procs; i++) {
        parse(&procs[i], argv[i + 2], i);
        procs[i].next_ns += start, procs[i].start_ns += start;
    }
    if (sampling) /* the reader's first read finds the driver's latest sample, of the GPU idle before: seen at once */
        samples[n_samples++] = (struct alnair_busy_sample){start - SAMPLE_NS / 2, 0};
    int running = 0;
    uint64_t switching = 0; /* what is left of a switch */
    for (uint64_t t = start; t < end; t += DT_NS) {
        if (t >= sample_end) { /* a whole percent of the period, as NVML gives it */
            if (sampling && n_samples < MAX_SAMPLES)
                samples[n_samples++] = (struct alnair_busy_sample){sample_end - early_ns, (double)((sample_busy * 100 + SAMPLE_NS / 2) / SAMPLE_NS) / 100};
            sample_busy = 0, sample_end += SAMPLE_NS;
        }
        for (int i = 0; i < n_procs; i++) run_cpu(&procs[i], t), tick(i, t);
        if (report_ns && t > start && (t - start) % report_ns == 0) report(t - start);
        int first_on = stepping(&procs[0], t);
        first_on_ns += first_on ? DT_NS : 0;
        /* the GPU: the running process keeps it for a slice while it has work, then the next in turn */
        if (!procs[running].queued_ns || slice_used >= slice_ns) {
            for (int k = 1; k <= n_procs; k++) {
                int next = (running + k) % n_procs;
                if (procs[next].queued_ns) {
                    if (next != running) slice_used = 0, switching = procs[running].queued_ns ? switch_ns : 0;
                    running = next;
                    break;
                }
            }
            if (slice_used >= slice_ns) slice_used = 0; /* alone with work: another slice */
        }
        struct proc *p = &procs[running];
        if (!p->queued_ns) continue;
        if (switching) { /* busy for neither */
            switching -= switching < DT_NS ? switching : DT_NS;
            device_busy += DT_NS, sample_busy += DT_NS;
            continue;
        }
        uint64_t ran = p->queued_ns < DT_NS ? p->queued_ns : DT_NS;
        p->queued_ns -= ran, p->served_ns += ran, slice_used += DT_NS, device_busy += DT_NS, sample_busy += ran;
        if (first_on) p->served_first_on_ns += ran;
    }
    for (int i = 0; i < n_procs; i++) alnair_gpu_time_close(&procs[i].g, end, procs[i].launches, &table.busy[i]);
    for (int i = 0; i < n_procs; i++) {
        struct proc *p = &procs[i];
        alnair_gpu_time_account(&p->g, end, &table, peers_of(i), samples, samples_seen(end));
        printf("process %d steps %llu true_ns %llu true_first_on_ns %llu gpu_time_ns %llu busy_ns %llu waited_ns %llu held_ns %llu "
               "turn_idle_ns %llu turns %llu turn_median_us %llu\n",
               i, (unsigned long long)p->steps, (unsigned long long)p->served_ns,
               (unsigned long long)p->served_first_on_ns, (unsigned long long)atomic_load(&p->g.gpu_time_ns),
               (unsigned long long)atomic_load(&p->g.busy_ns), (unsigned long long)p->waited_ns, (unsigned long long)p->held_ns,
               (unsigned long long)(p->turn_idle_ns + 0.5), (unsigned long long)p->turns,
               (unsigned long long)median_turn_us(p));
    }
    printf("device busy_ns %llu first_on_ns %llu\n", (unsigned long long)device_busy, (unsigned long long)first_on_ns);
    return 0;
}
