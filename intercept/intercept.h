/*
 * intercept.h - shared internals of libalnair: real-function slots, per-device
 * counters and the calls between the hook, limit and monitor modules.
 */
#ifndef ALNAIR_INTERCEPT_H
#define ALNAIR_INTERCEPT_H

#include <stdatomic.h>
#include <stdint.h>

#include "alnair_shm.h"
#include "cuda_driver.h"
#include "gpu_time.h"
#include "kernel_names.h"

#define ALNAIR_EXPORT __attribute__((visibility("default")))
#define ALNAIR_TLS __thread __attribute__((tls_model("initial-exec")))
#define ALNAIR_LIKELY(x) __builtin_expect(!!(x), 1)
#define ALNAIR_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- real driver functions ---------------------------------------------- */

#define ALNAIR_FN_TYPE(name, params, args) typedef CUresult(*name##_fn) params;
ALNAIR_HOOKS(ALNAIR_FN_TYPE)
ALNAIR_HELPERS(ALNAIR_FN_TYPE)
#undef ALNAIR_FN_TYPE

#define ALNAIR_FN_SLOT(name, params, args) name##_fn name;
struct alnair_real_fns {
    ALNAIR_HOOKS(ALNAIR_FN_SLOT)
    ALNAIR_HELPERS(ALNAIR_FN_SLOT)
};
#undef ALNAIR_FN_SLOT

extern struct alnair_real_fns alnair_real; /* driver.c */

/* Resolves one real function from the driver; NULL if it has none. */
void *alnair_resolve_real(const char *name, void **slot);
/* The C library's dlsym (ours, exported, hands out wrappers). */
typedef void *(*alnair_dlsym_fn)(void *, const char *);
alnair_dlsym_fn alnair_real_dlsym(void);

/* The real function, resolved on first use (one load and a branch after that). */
#define REAL(name) \
    ((name##_fn)(__atomic_load_n((void **)&alnair_real.name, __ATOMIC_ACQUIRE) \
                     ?: alnair_resolve_real(#name, (void **)&alnair_real.name)))

/* Calls the real function, or reports the driver lacks it. */
#define CALL_REAL(name, args) \
    ({ \
        name##_fn real_ = REAL(name); \
        real_ ? real_ args : CUDA_ERROR_NOT_SUPPORTED; \
    })

uint64_t alnair_monotonic_ns(void);
uint64_t alnair_boottime_ns(void);
uint64_t alnair_realtime_ns(void);

/* ---- per-device state ----------------------------------------------------- */

/* One direction's copies on one device (enum alnair_copy_direction). */
struct alnair_copy_counters {
    _Atomic uint64_t copies;
    _Atomic uint64_t bytes;
    _Atomic uint64_t sync_ns; /* time inside the synchronous ones */
};

struct alnair_device {
    _Atomic uint64_t graph_launches;     /* kernel launches: the kernel table's sum (kernel_names.h) */
    _Atomic uint64_t bytes_in_use;
    _Atomic uint64_t peak_bytes;
    _Atomic uint64_t allocations;
    _Atomic uint64_t failed_allocations;
    _Atomic uint64_t limit_denied_allocations;
    _Atomic uint64_t throttled_ns;
    _Atomic uint64_t barred_until_ns;  /* nonzero: launches take the gate, waiting until then while a debt of GPU
                                          time is owed, or for turns (compute_limit.c); 0: neither */
    _Atomic int seen;            /* the process has used this device */
    uint64_t memory_limit_bytes; /* 0 = none; fixed after init */
    uint32_t compute_limit_percent; /* the cap; 0 = none; fixed after init */
    uint32_t compute_share_percent; /* the share; 0 = none; fixed after init */
    struct alnair_copy_counters copies[ALNAIR_COPY_DIRECTIONS];
    /* Memory the GPU holds for the process beyond its allocations (pools.c, hooks_context.c). */
    _Atomic uint64_t pool_reserved_bytes; /* the pools' reservations at their last reading */
    _Atomic uint64_t pool_used_bytes;     /* of that, handed out, at the same reading */
    _Atomic uint64_t pool_cached_bytes;   /* reserved - used: what the limit charges besides bytes_in_use */
    _Atomic uint64_t context_bytes;       /* the live contexts' own memory, as measured at their creation */
    _Atomic uint64_t context_growth_bytes; /* what they grew by since, as NVML shows it (held_memory.c) */
    _Atomic int allocates_async;          /* cuMemAllocAsync was used: the device's current pool is read */
    struct alnair_gpu_time gpu_time;      /* busy spans and the GPU time they come to (gpu_time.c) */
    struct alnair_kernel_table kernels;   /* launches by kernel handle (kernel_names.c); untouched pages until used */
} __attribute__((aligned(64)));

enum alnair_mode { ALNAIR_UNCONFIGURED = 0, ALNAIR_PASS_THROUGH = 1, ALNAIR_ACTIVE = 2 };

struct alnair_state {
    _Atomic int mode;  /* enum alnair_mode; ALNAIR_INTERCEPT=off gives pass-through */
    int period_ms;     /* monitor publish period */
    /* CLOCK_BOOTTIME (the clock of the process start time) of the first launch and allocation; 0 before */
    _Atomic uint64_t first_launch_boottime_ns;
    _Atomic uint64_t first_allocation_boottime_ns;
    int limit_includes_context; /* ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT: the limit charges context_bytes too */
    int kernel_names_top;       /* ALNAIR_KERNEL_NAMES_TOP: kernels published by name (0: none) */
    struct alnair_device devices[ALNAIR_CUDA_MAX_DEVICES];
};

extern struct alnair_state alnair;

/* Reads the configuration once (lazily: constructors of other libraries may
 * call the driver before ours runs); returns 1 if the library is active. */
int alnair_configure(void);
static inline int alnair_active(void)
{
    int mode = atomic_load_explicit(&alnair.mode, memory_order_relaxed);
    if (ALNAIR_LIKELY(mode == ALNAIR_ACTIVE)) return 1;
    return mode == ALNAIR_UNCONFIGURED ? alnair_configure() : 0;
}

/* Registers what runs when the process first uses a device (the monitor's start, monitor.c). */
void alnair_on_first_device(void (*start)(void));

struct alnair_device *alnair_device_at(int ordinal);
struct alnair_device *alnair_current_device_slow(void);
void alnair_device_first_seen(struct alnair_device *d);

/* The calling thread's device ordinal; -1: look it up on next use. */
extern ALNAIR_TLS int alnair_thread_device;

/* The calling thread's device, from its current context; NULL if unknown. Inline:
 * it is on every launch. */
static inline struct alnair_device *alnair_current_device(void)
{
    int ordinal = alnair_thread_device;
    if (ALNAIR_UNLIKELY(ordinal < 0 || ordinal >= ALNAIR_CUDA_MAX_DEVICES)) return alnair_current_device_slow();
    struct alnair_device *d = &alnair.devices[ordinal];
    if (ALNAIR_UNLIKELY(!atomic_load_explicit(&d->seen, memory_order_relaxed))) alnair_device_first_seen(d);
    return d;
}
int alnair_device_ordinal(const struct alnair_device *d);
/* The device a context is on, if a context call told us; NULL otherwise (never asks the driver). */
struct alnair_device *alnair_context_device(CUcontext ctx);

/* A launch the driver accepted: if the process was idle on d, a busy span begins (one load and a branch if not). */
static inline void alnair_note_busy(struct alnair_device *d)
{
    if (ALNAIR_UNLIKELY(!alnair_gpu_time_busy(&d->gpu_time))) alnair_gpu_time_begin(&d->gpu_time, alnair_monotonic_ns());
}

/* Records now as the first time of an event (a launch, an allocation): one load and a branch after that. */
void alnair_note_first_slow(_Atomic uint64_t *boottime_ns);
static inline void alnair_note_first(_Atomic uint64_t *boottime_ns)
{
    if (ALNAIR_UNLIKELY(!atomic_load_explicit(boottime_ns, memory_order_relaxed))) alnair_note_first_slow(boottime_ns);
}

/* Bytes per element of a CUDA array format (CUarray_format): the common ones exactly, others as 4 (an
 * estimate: the driver also pads arrays, so array sizes are approximate). */
static inline uint64_t alnair_array_format_bytes(int format)
{
    switch (format) {
    case 0x01: case 0x08: return 1; /* 8-bit integers */
    case 0x02: case 0x09: case 0x10: return 2; /* 16-bit integers, half */
    default: return 4;
    }
}
/* The device's UUID bytes, asked of the driver once; NULL if it will not say (monitor thread). */

/* Context bookkeeping, called by the context hooks. */
void alnair_context_bind(CUcontext ctx, CUdevice dev);
void alnair_context_forget(CUcontext ctx); /* and gives back what its own memory added */
/* 1 once per bound context: the caller measures its own memory, then charges it to the context's device. */
int alnair_context_claim_measurement(CUcontext ctx);
void alnair_context_charge(CUcontext ctx, uint64_t bytes);
void alnair_thread_context_changed(void); /* current context unknown now */
void alnair_thread_uses(CUcontext ctx);    /* the thread made ctx current */

/* What the memory limit charges on d besides its allocations: pools' cached memory, and the contexts'
 * own memory when ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT is on. */
static inline uint64_t alnair_context_memory(struct alnair_device *d)
{
    return atomic_load_explicit(&d->context_bytes, memory_order_relaxed) +
           atomic_load_explicit(&d->context_growth_bytes, memory_order_relaxed);
}
static inline uint64_t alnair_memory_overhead(struct alnair_device *d)
{
    uint64_t extra = atomic_load_explicit(&d->pool_cached_bytes, memory_order_relaxed);
    if (alnair.limit_includes_context) extra += alnair_context_memory(d);
    return extra;
}
/* Monitor tick: with a memory limit, what NVML's newest reading shows the GPU holding for the process beyond
 * what is counted becomes context_growth_bytes (held_memory.c). */
void alnair_held_memory_tick(const uint8_t *const uuids[ALNAIR_CUDA_MAX_DEVICES]);

/* Stream-ordered memory pools (pools.c). A pool allocated from or created is remembered with its device;
 * a destroyed one forgotten. */
void alnair_pool_note(CUmemoryPool pool, int device);
void alnair_pool_forget(CUmemoryPool pool);
int alnair_pool_device(CUmemoryPool pool); /* -1 if not known */
int alnair_pool_slot(CUmemoryPool pool);   /* the pool's place in pools.c's table, -1 if not known */
int alnair_pool_current_slot(int ordinal); /* the device's current pool (cuMemAllocAsync's), -1 if not known */
/* An allocation of d from the pool in `slot` takes size bytes of that pool's cache (charged already) if the
 * cache holds them all; returns the bytes taken (size or 0). A free into it, or an allocation that failed, gives bytes back. */
uint64_t alnair_pool_take_cached(struct alnair_device *d, int slot, uint64_t size);
void alnair_pool_return_cached(struct alnair_device *d, int slot, uint64_t bytes);
/* Reads every pool of the device (ordinal, or -1 for all) and stores what they reserve (driver calls:
 * the monitor thread, and allocations the limit would refuse). */
void alnair_pools_read(int ordinal);
/* An allocation of d would pass the limit by `over` bytes: read the pools exactly and, if their cached
 * memory is what stands in the way, trim it. Returns 1 if the charge went down. */
int alnair_pools_make_room(struct alnair_device *d, uint64_t over);
/* Monitor tick: the current pools of devices that allocate asynchronously, then every pool's figures. */
void alnair_pools_tick(void);

/* Compute limits: while a debt of GPU time is owed on d (a cap or a share), a launch onto `stream`
 * (per_thread: a _ptsz entry point's, whose stream 0 is the thread's own) waits for the monitor to clear
 * it, its stream drained first; then it passes the turns' gate (turns.h). One load and a branch when
 * nothing is owed and no turn is due. */
void alnair_wait_while_owed(struct alnair_device *d, CUstream stream, int per_thread);
static inline void alnair_pay_debt(struct alnair_device *d, CUstream stream, int per_thread)
{
    if (ALNAIR_UNLIKELY(atomic_load_explicit(&d->barred_until_ns, memory_order_relaxed)))
        alnair_wait_while_owed(d, stream, per_thread);
}

/* Monitor-thread side of the compute limits: measure GPU time, keep the debts, decide the waits. */
void alnair_compute_limit_tick(uint64_t now_ns, const uint8_t *const uuids[ALNAIR_CUDA_MAX_DEVICES]);

/* Fork handling, one registration point: a module with per-process state declares its handlers
 * (any may be NULL) with ALNAIR_ON_FORK at file scope; a constructor adds them to state.c's list at
 * load, and alnair_configure() hands the list to pthread_atfork once, so no module names another's.
 * Prepare handlers run in reverse order of registration, parent and child handlers in order. */
struct alnair_fork_handlers {
    void (*prepare)(void);
    void (*parent)(void);
    void (*child)(void);
};
void alnair_on_fork(const struct alnair_fork_handlers *handlers);
#define ALNAIR_ON_FORK(name, prepare, parent, child) \
    static const struct alnair_fork_handlers name = {prepare, parent, child}; \
    __attribute__((constructor)) static void name##_register(void) { alnair_on_fork(&name); }

void alnair_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
