// kernels.cu - a CUDA program with known work, for checking the intercept on a real GPU.
//   kernels count N B K   launch N empty kernels and cudaMalloc B bytes in K chunks, print "ready", wait for stdin
//   kernels bench M R     time R rounds of M empty-kernel launches; print each round's ns per launch
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

__global__ void empty_kernel() {}

static void check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

static int count(long n, size_t bytes, int chunks)
{
    for (long i = 0; i < n; i++) empty_kernel<<<1, 1>>>();
    check(cudaGetLastError(), "launch");
    for (int i = 0; i < chunks; i++) {
        void *p;
        size_t size = bytes / chunks + (i == chunks - 1 ? bytes % chunks : 0);
        check(cudaMalloc(&p, size), "cudaMalloc");
    }
    check(cudaDeviceSynchronize(), "sync");
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    return 0;
}

static int bench(long m, int rounds)
{
    check(cudaFree(0), "init");
    for (int i = 0; i < 1000; i++) empty_kernel<<<1, 1>>>();
    check(cudaDeviceSynchronize(), "warm-up");
    for (int r = 0; r < rounds; r++) {
        auto start = std::chrono::steady_clock::now();
        for (long i = 0; i < m; i++) empty_kernel<<<1, 1>>>();
        auto end = std::chrono::steady_clock::now();
        check(cudaDeviceSynchronize(), "sync");
        printf("%.1f\n", std::chrono::duration<double, std::nano>(end - start).count() / m);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "count")) return count(atol(argv[2]), strtoull(argv[3], 0, 10), atoi(argv[4]));
    if (argc == 4 && !strcmp(argv[1], "bench")) return bench(atol(argv[2]), atoi(argv[3]));
    fprintf(stderr, "usage: kernels count N B K | kernels bench M R\n");
    return 2;
}
