// Facts for measuring GPU time per process (the GPU sharing issue's item 1), on a real GPU:
//   probe cost N           ns per cudaEventRecord (timing on and off), per empty launch, per launch + record
//   probe spin MS START_NS a kernel on every SM that stamps %globaltimer every ~5 us for MS of wall time, launched
//                          at CLOCK_REALTIME START_NS (two processes started together share the GPU): from block
//                          0's stamps, the time it ran and the gaps when its context was switched out, beside the
//                          events' elapsed time around it.
// Each prints one JSON line. Built and run by tests/gpu/run_gpu_time_probe.sh.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STAMPS 200000
#define SAMPLE_NS 5000ull
#define GAP_NS 50000ull  // no stamp for this long: the block was not running

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

__device__ unsigned long long globaltimer(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void empty(void) {}

__global__ void spin(unsigned long long *stamps, int *count, unsigned long long run_ns)
{
    if (threadIdx.x) return;
    unsigned long long start = globaltimer(), last = 0, now;
    int k = 0;
    while ((now = globaltimer()) - start < run_ns) {
        if (blockIdx.x == 0 && now - last >= SAMPLE_NS && k < STAMPS) stamps[k++] = last = now;
    }
    if (blockIdx.x == 0) *count = k;
}

static double per_call(int n, void (*body)(cudaStream_t, cudaEvent_t), cudaStream_t s, cudaEvent_t e)
{
    check(cudaStreamSynchronize(s), "sync");
    double t = now_ns();
    for (int i = 0; i < n; i++) body(s, e);
    double spent = now_ns() - t;
    check(cudaStreamSynchronize(s), "sync");
    return spent / n;
}

static void record(cudaStream_t s, cudaEvent_t e) { cudaEventRecord(e, s); }
static void launch(cudaStream_t s, cudaEvent_t e) { (void)e; empty<<<1, 1, 0, s>>>(); }
static void launch_and_record(cudaStream_t s, cudaEvent_t e) { empty<<<1, 1, 0, s>>>(); cudaEventRecord(e, s); }

static int cost(int n)
{
    cudaStream_t s;
    cudaEvent_t timed, untimed;
    check(cudaStreamCreate(&s), "stream");
    check(cudaEventCreate(&timed), "event");
    check(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), "event");
    launch(s, timed);  // warm up: module load
    double rec = per_call(n, record, s, timed), rec_untimed = per_call(n, record, s, untimed);
    double lau = per_call(n, launch, s, timed), both = per_call(n, launch_and_record, s, timed);
    printf("{\"probe\": \"cost\", \"n\": %d, \"event_record_ns\": %.1f, \"event_record_untimed_ns\": %.1f, "
           "\"empty_launch_ns\": %.1f, \"launch_and_record_ns\": %.1f}\n", n, rec, rec_untimed, lau, both);
    return 0;
}

static int spin_at(double run_ms, long long start_realtime_ns)
{
    int sms;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attribute");
    unsigned long long *stamps;
    int *count;
    check(cudaMalloc(&stamps, STAMPS * sizeof *stamps), "malloc");
    check(cudaMalloc(&count, sizeof *count), "malloc");
    cudaEvent_t before, after;
    check(cudaEventCreate(&before), "event");
    check(cudaEventCreate(&after), "event");
    empty<<<1, 1>>>();
    check(cudaDeviceSynchronize(), "warm up");
    struct timespec t;
    do clock_gettime(CLOCK_REALTIME, &t);
    while (t.tv_sec * 1000000000ll + t.tv_nsec < start_realtime_ns);
    double wall = now_ns();
    check(cudaEventRecord(before), "record");
    spin<<<sms, 32>>>(stamps, count, (unsigned long long)(run_ms * 1e6));
    check(cudaEventRecord(after), "record");
    check(cudaEventSynchronize(after), "sync");
    wall = now_ns() - wall;
    float elapsed_ms;
    check(cudaEventElapsedTime(&elapsed_ms, before, after), "elapsed");
    int n;
    check(cudaMemcpy(&n, count, sizeof n, cudaMemcpyDeviceToHost), "copy");
    unsigned long long *host = (unsigned long long *)malloc(n * sizeof *host);
    check(cudaMemcpy(host, stamps, n * sizeof *host, cudaMemcpyDeviceToHost), "copy");
    double ran = 0, gaps = 0, longest = 0;
    int gap_count = 0;
    for (int i = 1; i < n; i++) {
        double d = (double)(host[i] - host[i - 1]);
        if (d < GAP_NS) ran += d;
        else gaps += d, gap_count++, longest = d > longest ? d : longest;
    }
    printf("{\"probe\": \"spin\", \"sms\": %d, \"run_ms\": %.1f, \"wall_ms\": %.3f, \"event_elapsed_ms\": %.3f, "
           "\"stamps\": %d, \"span_ms\": %.3f, \"ran_ms\": %.3f, \"gaps\": %d, \"gap_ms\": %.3f, "
           "\"mean_gap_ms\": %.3f, \"longest_gap_ms\": %.3f, \"first_stamp_ns\": %llu, \"last_stamp_ns\": %llu}\n",
           sms, run_ms, wall / 1e6, elapsed_ms, n, n > 1 ? (host[n - 1] - host[0]) / 1e6 : 0.0, ran / 1e6, gap_count,
           gaps / 1e6, gap_count ? gaps / gap_count / 1e6 : 0.0, longest / 1e6, n ? host[0] : 0ull,
           n ? host[n - 1] : 0ull);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "cost")) return cost(atoi(argv[2]));
    if (argc == 4 && !strcmp(argv[1], "spin")) return spin_at(atof(argv[2]), atoll(argv[3]));
    fprintf(stderr, "usage: %s cost N | spin MS START_REALTIME_NS\n", argv[0]);
    return 2;
}
