/*
 * hooks_launch.c - every kernel and graph launch path: count it on the calling
 * thread's device, and hold it while the process owes GPU time to a limit (compute_limit.c).
 *
 * The hot path with no limit is: a mode load, a thread-local device lookup and,
 * after the driver accepts the launch, the kernel's count (kernel_names.h: one relaxed atomic add) and checks that
 * the process is busy on the device (gpu_time.c) and that the first launch's time is known. No locks, no syscalls, no getenv, no driver calls.
 * The latest launch's time is not taken here (a clock read per launch): the
 * monitor stamps it when it sees the count move (monitor.c).
 */
#include "intercept.h"

/* The calling thread's device, once what it owes is paid. */
static inline struct alnair_device *before_launch(CUstream stream, int per_thread)
{
    if (!alnair_active()) return NULL;
    struct alnair_device *d = alnair_current_device();
    if (d) alnair_pay_debt(d, stream, per_thread);
    return d;
}

static inline void note_launch(struct alnair_device *d)
{
    alnair_note_busy(d);
    alnair_note_first(&alnair.first_launch_boottime_ns);
}

/* An accepted kernel launch counts once, in its kernel's slot: the device's kernel launches are their sum. */
static inline void count_kernel(struct alnair_device *d, CUfunction f)
{
    alnair_kernel_count(&d->kernels, f);
    note_launch(d);
}

static inline void count_graph(struct alnair_device *d)
{
    atomic_fetch_add_explicit(&d->graph_launches, 1, memory_order_relaxed);
    note_launch(d);
}

/* stream: the launch's stream, as an expression of its parameters; per_thread: a _ptsz entry point */
#define KERNEL_LAUNCH(name, params, args, stream, per_thread) \
    ALNAIR_EXPORT CUresult name params \
    { \
        struct alnair_device *d = before_launch(stream, per_thread); \
        CUresult r = CALL_REAL(name, args); \
        if (d && r == CUDA_SUCCESS) count_kernel(d, f); \
        return r; \
    }

#define EX_STREAM (config ? config->hStream : NULL)
KERNEL_LAUNCH(cuLaunchKernel, ALNAIR_LAUNCH_PARAMS, ALNAIR_LAUNCH_ARGS, hStream, 0)
KERNEL_LAUNCH(cuLaunchKernel_ptsz, ALNAIR_LAUNCH_PARAMS, ALNAIR_LAUNCH_ARGS, hStream, 1)
KERNEL_LAUNCH(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
              (config, f, kernelParams, extra), EX_STREAM, 0)
KERNEL_LAUNCH(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
              (config, f, kernelParams, extra), EX_STREAM, 1)
KERNEL_LAUNCH(cuLaunchCooperativeKernel, ALNAIR_COOP_PARAMS, ALNAIR_COOP_ARGS, hStream, 0)
KERNEL_LAUNCH(cuLaunchCooperativeKernel_ptsz, ALNAIR_COOP_PARAMS, ALNAIR_COOP_ARGS, hStream, 1)

/* A graph's kernels are not counted by name: the launch names a graph, not its kernels. */
#define GRAPH_LAUNCH(name, per_thread) \
    ALNAIR_EXPORT CUresult name(CUgraphExec hGraphExec, CUstream hStream) \
    { \
        struct alnair_device *d = before_launch(hStream, per_thread); \
        CUresult r = CALL_REAL(name, (hGraphExec, hStream)); \
        if (d && r == CUDA_SUCCESS) count_graph(d); \
        return r; \
    }

GRAPH_LAUNCH(cuGraphLaunch, 0)
GRAPH_LAUNCH(cuGraphLaunch_ptsz, 1)

/* The device a stream belongs to: asks the driver, so only for this rare,
 * deprecated multi-device form. */
static struct alnair_device *stream_device(CUstream stream)
{
    CUcontext ctx;
    CUdevice dev;
    cuStreamGetCtx_fn get_ctx = REAL(cuStreamGetCtx);
    cuCtxGetCurrent_fn get_current = REAL(cuCtxGetCurrent);
    cuCtxGetDevice_fn get_device = REAL(cuCtxGetDevice);
    cuCtxSetCurrent_fn set_current = REAL(cuCtxSetCurrent);
    CUcontext saved;
    if (!get_ctx || !get_current || !get_device || !set_current) return NULL;
    if (get_ctx(stream, &ctx) != CUDA_SUCCESS || get_current(&saved) != CUDA_SUCCESS) return NULL;
    int ok = set_current(ctx) == CUDA_SUCCESS && get_device(&dev) == CUDA_SUCCESS;
    set_current(saved);
    return ok ? alnair_device_at(dev) : NULL;
}

ALNAIR_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList,
                                                             unsigned int numDevices, unsigned int flags)
{
    if (!alnair_active() || !launchParamsList)
        return CALL_REAL(cuLaunchCooperativeKernelMultiDevice, (launchParamsList, numDevices, flags));
    struct alnair_device *devices[ALNAIR_CUDA_MAX_DEVICES] = {0};
    unsigned int n = numDevices < ALNAIR_CUDA_MAX_DEVICES ? numDevices : ALNAIR_CUDA_MAX_DEVICES;
    for (unsigned int i = 0; i < n; i++) {
        devices[i] = stream_device(launchParamsList[i].hStream);
        if (devices[i]) alnair_pay_debt(devices[i], launchParamsList[i].hStream, 0);
    }
    CUresult r = CALL_REAL(cuLaunchCooperativeKernelMultiDevice, (launchParamsList, numDevices, flags));
    for (unsigned int i = 0; r == CUDA_SUCCESS && i < n; i++)
        if (devices[i]) count_kernel(devices[i], launchParamsList[i].function);
    return r;
}
