/*
 * alnair_shm.h - the shared-memory ABI between Alnair's writers and readers.
 *
 * This header is the single source of truth for the segment layout. The Python
 * mirror (abi/layout.py) is what every writer and reader imports; tests/abi proves the two agree
 * byte for byte. docs/shm-abi.md explains the rules; the short version:
 *
 *   - one segment (file) per writer process and record kind, named
 *     alnair.<kind>.<pid-namespace-inode>.<pid>.<start-time-ticks>
 *     in ALNAIR_SHM_DIR (default /dev/shm, the POSIX shared-memory namespace);
 *   - a fixed 256-byte header, then the kind's record (record_size bytes);
 *   - the writer holds a POSIX write lock (fcntl F_SETLK) on the file for its
 *     lifetime: a segment nobody holds a lock on belongs to a dead writer;
 *   - every publish is bracketed by the seqlock counter `seq` (odd = writing);
 *   - fields are only ever appended: new kinds and new fields never move an
 *     existing offset, and abi_version changes only when they would have to.
 *
 * All integers are little-endian host order (the writer and reader share a kernel).
 */
#ifndef ALNAIR_SHM_H
#define ALNAIR_SHM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ALNAIR_SHM_MAGIC 0x48535249414E4C41ULL /* the bytes "ALNAIRSH" read as a little-endian u64 */
#define ALNAIR_SHM_ABI_VERSION 2u /* 2: the compute limit became time windows */
/* No kind's record may be larger, whatever fields later versions append: readers refuse larger ones unread. */
#define ALNAIR_MAX_RECORD_SIZE 65536u
#define ALNAIR_SHM_DEFAULT_DIR "/dev/shm"
#define ALNAIR_SHM_NAME_PREFIX "alnair."
/* Created in the directory by a reader that serves exited writers' last records for a while: where it
 * exists, a writer that exits cleanly publishes its final counters and leaves its segment for that reader
 * to serve and reclaim; where it does not, the writer removes its segment. */
#define ALNAIR_READER_MARKER "alnair.reader"

enum alnair_record_kind {
    ALNAIR_KIND_CUDA = 1,   /* struct alnair_cuda_record, written by the CUDA intercept */
    ALNAIR_KIND_PYTHON = 2, /* struct alnair_python_record, written by the Python intercept */
};

#define ALNAIR_POD_UID_LEN 48      /* 36-character UUID, NUL-padded */
#define ALNAIR_CONTAINER_ID_LEN 80 /* 64 hex digits (or runtime://id), NUL-padded */
#define ALNAIR_COMM_LEN 16         /* like /proc/<pid>/comm */

/* The fixed header every segment starts with: 256 bytes. */
struct alnair_shm_header {
    uint64_t magic;               /* ALNAIR_SHM_MAGIC */
    uint32_t abi_version;         /* ALNAIR_SHM_ABI_VERSION */
    uint32_t header_size;         /* sizeof(struct alnair_shm_header) */
    uint32_t record_kind;         /* enum alnair_record_kind */
    uint32_t record_size;         /* bytes of the kind's record after the header */
    int32_t writer_pid;           /* pid as the writer sees it (its own pid namespace) */
    uint32_t flags;               /* reserved, 0 */
    uint64_t pid_namespace_inode; /* inode of /proc/self/ns/pid: tells pid namespaces apart */
    uint64_t start_time_ticks;    /* field 22 of /proc/self/stat: a reused pid has another */
    uint64_t seq;                 /* seqlock: odd while a publish is in progress */
    uint64_t update_time_ns;      /* CLOCK_REALTIME of the last publish */
    char pod_uid[ALNAIR_POD_UID_LEN];             /* when the writer knows it, else empty */
    char container_id[ALNAIR_CONTAINER_ID_LEN];   /* when the writer knows it, else empty */
    char comm[ALNAIR_COMM_LEN];                   /* the writer's process name */
    uint8_t reserved[48];
};

/* ---- kind ALNAIR_KIND_CUDA ------------------------------------------------ */

#define ALNAIR_CUDA_MAX_DEVICES 64 /* 8 GPUs x 7 MIG instances fit */
#define ALNAIR_CUDA_DEVICE_MIG 0x1u /* flags: the device is a MIG instance */
#define ALNAIR_CUDA_DEVICE_GPU_TIME 0x2u /* flags: gpu_time_ns and busy_ns are measured (writers before them leave 0) */

/* Counters for one device the process uses: 128 bytes. */
struct alnair_cuda_device {
    uint32_t device_index;            /* CUDA ordinal as the process sees it */
    uint32_t flags;                   /* ALNAIR_CUDA_DEVICE_* */
    uint8_t uuid[16];                 /* CUuuid bytes (cuDeviceGetUuid) */
    uint64_t kernel_launches;         /* every kernel launch path */
    uint64_t graph_launches;          /* cuGraphLaunch */
    uint64_t bytes_in_use;            /* device memory allocated and not freed */
    uint64_t peak_bytes;              /* high-water mark of bytes_in_use */
    uint64_t allocations;             /* successful allocations */
    uint64_t failed_allocations;      /* allocations the driver refused */
    uint64_t limit_denied_allocations; /* allocations refused by the memory limit */
    uint64_t memory_limit_bytes;      /* 0 = no limit */
    uint32_t compute_limit_percent;   /* 0 = no limit, else 1..100 */
    uint32_t compute_share_percent;   /* 0 = no share, else 1..100 (ALNAIR_COMPUTE_SHARE) */
    uint64_t compute_quota_ns;        /* launch window granted per period, after feedback */
    uint64_t throttled_ns;            /* time launches waited for their window */
    uint64_t compute_period_ns;       /* the scheduling period (0 = takes no turns) */
    uint64_t gpu_time_ns;             /* the GPU's time this process got: its busy time, each moment divided among
                                         the processes busy on the GPU then, scaled to the time the GPU says it
                                         was busy (ALNAIR_CUDA_DEVICE_GPU_TIME) */
};

/* Which way a copy went; "device" is memory the process allocated on a GPU (managed memory too). */
enum alnair_copy_direction {
    ALNAIR_COPY_HOST_TO_DEVICE = 0,
    ALNAIR_COPY_DEVICE_TO_HOST = 1,
    ALNAIR_COPY_DEVICE_TO_DEVICE = 2, /* peer copies between GPUs too */
    ALNAIR_COPY_DIRECTIONS = 3,
};

/* One direction's copies on one device: 24 bytes. */
struct alnair_cuda_copy {
    uint64_t copies;  /* copies the driver accepted (a batch counts each of its copies) */
    uint64_t bytes;   /* their bytes */
    uint64_t sync_ns; /* time the program spent inside the synchronous ones */
};

/* A device's fields appended after devices[]: devices_ext[i] belongs to devices[i]. 128 bytes. */
struct alnair_cuda_device_ext {
    struct alnair_cuda_copy copies[ALNAIR_COPY_DIRECTIONS]; /* by enum alnair_copy_direction */
    uint64_t busy_ns; /* time the process had work on the GPU, shared or not (ALNAIR_CUDA_DEVICE_GPU_TIME) */
    uint64_t reserved[6];
};

#define ALNAIR_CUDA_LIMIT_INCLUDES_CONTEXT 0x1u /* memory flags: the memory limit charges the context too */

/* A device's memory as the GPU sees it, appended after devices_ext[]: devices_memory[i] belongs to devices[i].
 * 64 bytes. */
struct alnair_cuda_device_memory {
    uint64_t context_bytes;       /* device memory the process's live contexts hold themselves (0 = not measured) */
    uint64_t pool_reserved_bytes; /* memory the stream-ordered pools the process allocates from hold reserved */
    uint64_t pool_used_bytes;     /* of that, what is handed out to allocations */
    uint64_t charged_bytes;       /* what the memory limit is checked against: bytes_in_use + pool_reserved -
                                     pool_used, + context_bytes with ALNAIR_CUDA_LIMIT_INCLUDES_CONTEXT */
    uint32_t flags;               /* ALNAIR_CUDA_LIMIT_INCLUDES_CONTEXT */
    uint32_t reserved0;
    uint64_t context_growth_bytes; /* of context_bytes, what the contexts grew by after their creation, as NVML shows
                                      it (read once a second, with a memory limit only; 0 otherwise) */
    uint64_t reserved[2];
};

/* The process's activity: times of its first and latest use of the GPU. 64 bytes. */
struct alnair_cuda_activity {
    uint64_t first_launch_ns;     /* process start (start_time_ticks) to its first kernel or graph launch; 0 before */
    uint64_t first_allocation_ns; /* process start to its first device memory allocation; 0 before */
    uint64_t last_launch_time_ns; /* CLOCK_REALTIME of the publish that first counted the latest launch; 0 before */
    uint64_t reserved[5];
};

#define ALNAIR_CUDA_KERNEL_NAME_LEN 256 /* demangled where the process can demangle; NUL-padded: at most 255 bytes */
#define ALNAIR_CUDA_MAX_KERNELS 96      /* rows: at most 32 named kernels, then one ALNAIR_CUDA_KERNEL_OTHER per device */
#define ALNAIR_CUDA_KERNEL_OTHER 0x1u   /* kernel flags: the device's launches of every kernel not named in the table */

/* A kernel's launches on one device since the process started, or (ALNAIR_CUDA_KERNEL_OTHER) the launches of the
 * device's kernels that were not named when they ran. 272 bytes. */
struct alnair_cuda_kernel {
    char name[ALNAIR_CUDA_KERNEL_NAME_LEN]; /* empty: the driver could not name it (or an OTHER row) */
    uint64_t launches;
    uint32_t device_index; /* a devices[].device_index of the record */
    uint32_t flags;        /* ALNAIR_CUDA_KERNEL_OTHER */
};

/* The process's most launched kernels (ALNAIR_KERNEL_NAMES_TOP of them, by name and device), then the OTHER rows.
 * Kernel launches only: graphs' kernels are not seen. 26144 bytes. */
struct alnair_cuda_kernels {
    uint32_t count; /* kernels[0 .. count) are valid; no (device_index, name) twice */
    uint32_t reserved0;
    uint64_t reserved[3];
    struct alnair_cuda_kernel kernels[ALNAIR_CUDA_MAX_KERNELS];
};

/* The cuda kind's record: devices[0 .. device_count) are valid, and so are devices_ext[0 .. device_count).
 * activity, devices_ext, devices_memory and kernels were appended after the first writers shipped: a record_size that ends before
 * a field means its writer does not have it (readers: absent, not zero). */
struct alnair_cuda_record {
    uint32_t device_count;
    uint32_t max_devices; /* ALNAIR_CUDA_MAX_DEVICES */
    uint64_t reserved[3];
    struct alnair_cuda_device devices[ALNAIR_CUDA_MAX_DEVICES];
    struct alnair_cuda_activity activity;                           /* appended: offset 8224 */
    struct alnair_cuda_device_ext devices_ext[ALNAIR_CUDA_MAX_DEVICES]; /* appended: offset 8288 */
    struct alnair_cuda_device_memory devices_memory[ALNAIR_CUDA_MAX_DEVICES]; /* appended: offset 16480 */
    struct alnair_cuda_kernels kernels;                                       /* appended: offset 20576 */
};

/* ---- kind ALNAIR_KIND_PYTHON ---------------------------------------------- */

#define ALNAIR_PYTHON_NAME_LEN 48      /* UTF-8, NUL-padded: at most 47 bytes */
#define ALNAIR_PYTHON_MAX_COUNTERS 32
#define ALNAIR_PYTHON_MAX_PHASES 32
#define ALNAIR_PYTHON_TORCH 0x1u             /* flags: PyTorch's DataLoader and optimizers are hooked */
#define ALNAIR_PYTHON_DATALOADER_WORKER 0x2u /* flags: the process is a DataLoader worker */

/* A custom counter (alnair.counter(name).inc()): 64 bytes. */
struct alnair_python_counter {
    char name[ALNAIR_PYTHON_NAME_LEN];
    uint64_t value;
    uint64_t reserved;
};

/* A custom phase (with alnair.phase(name): ...): 64 bytes. */
struct alnair_python_phase {
    char name[ALNAIR_PYTHON_NAME_LEN];
    uint64_t count;    /* phases completed */
    uint64_t total_ns; /* time inside them */
};

/* The python kind's record. A step is one batch a training loop took from a
 * DataLoader (an iterator started with autograd enabled); see docs/shm-abi.md. */
struct alnair_python_record {
    uint32_t flags;                /* ALNAIR_PYTHON_* */
    uint32_t counter_count;        /* counters[0 .. counter_count) are valid */
    uint32_t phase_count;          /* phases[0 .. phase_count) are valid */
    uint32_t max_counters;         /* ALNAIR_PYTHON_MAX_COUNTERS */
    uint32_t max_phases;           /* ALNAIR_PYTHON_MAX_PHASES */
    uint32_t reserved0;
    uint64_t steps;                /* batches taken by training loops */
    uint64_t samples;              /* dataset items in those batches */
    uint64_t epochs;               /* training loops that ran their iterator to the end */
    uint64_t optimizer_steps;      /* torch.optim.Optimizer.step calls that completed */
    uint64_t data_wait_ns;         /* time blocked waiting for the next batch */
    uint64_t step_ns;              /* time in steps: data wait plus the loop body */
    uint64_t first_step_ns;        /* process start to the first step; 0 before it */
    uint64_t reserved[6];
    struct alnair_python_counter counters[ALNAIR_PYTHON_MAX_COUNTERS];
    struct alnair_python_phase phases[ALNAIR_PYTHON_MAX_PHASES];
};

/* ---- the GPU share table (between writers) -------------------------------
 *
 * The processes using one physical GPU meet in one file,
 *     ALNAIR_SHM_DIR/alnair.share.<32 hex digits of the GPU's UUID>
 * an array of slots, all zero when new. A process owns a slot while it holds a
 * POSIX write lock (F_SETLK) on the slot's bytes; its quota is its cap in parts per
 * million (0 = slot unused), or ALNAIR_SHARE_UNLIMITED for a process without one.
 * (Processes of libraries before the debts, to 0d1cd2a, laid out windows of every
 * ALNAIR_SHARE_PERIOD_NS from the quotas and launched only inside their own.)
 *
 * After the slots (appended: processes that know only the slots read and write the
 * first 512 bytes), each slot's busy timeline: how much of every recent millisecond
 * of CLOCK_MONOTONIC its owner had work on the GPU, so each process can divide its
 * busy time among the processes busy at the same moments (its GPU time). Every
 * process using the GPU joins the table for it, limited or not.
 */
#define ALNAIR_SHARE_NAME_PREFIX "alnair.share."
#define ALNAIR_SHARE_SLOTS 64
#define ALNAIR_SHARE_PERIOD_NS 100000000ull /* 100 ms */
#define ALNAIR_SHARE_UNLIMITED 0xffffffffu   /* the quota of a process without a limit */
#define ALNAIR_SHARE_REST_FLOOR_PPM 50000u   /* 5%: the least an unlimited process gets */

struct alnair_share_slot {
    uint32_t quota_ppm; /* window length, parts per million of the period */
    int32_t pid;        /* the owner's pid in its own namespace, for people reading the file */
};

#define ALNAIR_SHARE_BUSY_MS 48    /* milliseconds of busy timeline per slot */
#define ALNAIR_SHARE_BUSY_FULL 250u /* a millisecond's busy[] value when busy all of it */

/* A slot's busy timeline: 72 bytes. */
struct alnair_share_busy {
    uint64_t until_ms;                  /* CLOCK_MONOTONIC ms: busy[] holds the ALNAIR_SHARE_BUSY_MS ms before it */
    uint32_t share_ppm;                 /* the owner's compute share (ALNAIR_COMPUTE_SHARE), ppm; 0: none */
    uint32_t turn;                      /* the owner's turn on the GPU: ALNAIR_TURN_* below (0: none) */
    uint64_t wanting;                   /* bit m % 48: in ms m the owner had work on the GPU or waited to launch */
    uint8_t busy[ALNAIR_SHARE_BUSY_MS]; /* ms m (until_ms - 48 <= m < until_ms): busy[m % 48] / 250 of it busy */
};

/* A slot's turn word. A process that a limit held back takes a turn when released: it runs alone while it has
 * work, and the others hold their launches, their queues drained, so the GPU does not switch between them every
 * time slice. The state is in bits 24-25; bit 26 says the owner holds for another's turn with its queue drained;
 * a due turn's release time is in bits 0-23, in us after the start of ms until_ms (written with the timeline).
 * intercept/turns.h has the protocol. */
#define ALNAIR_TURN_STATE_SHIFT 24
#define ALNAIR_TURN_DUE 1u          /* released at the time in bits 0-23: the others hold from then */
#define ALNAIR_TURN_TAKEN 2u        /* running its turn now */
#define ALNAIR_TURN_HOLDING 0x4000000u /* bit 26 */
#define ALNAIR_TURN_AWARE 0x8000000u   /* bit 27: the owner's library takes part in turns (so holds for them) */
#define ALNAIR_TURN_RELEASE_MASK 0xffffffu

struct alnair_share_table {
    struct alnair_share_slot slots[ALNAIR_SHARE_SLOTS];
    struct alnair_share_busy busy[ALNAIR_SHARE_SLOTS]; /* appended: offset 512 */
};

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(struct alnair_shm_header) == 256, "header is 256 bytes");
_Static_assert(sizeof(struct alnair_cuda_device) == 128, "cuda device entry is 128 bytes");
_Static_assert(sizeof(struct alnair_cuda_device_ext) == 128, "cuda device extension is 128 bytes");
_Static_assert(sizeof(struct alnair_cuda_device_memory) == 64, "cuda device memory entry is 64 bytes");
_Static_assert(sizeof(struct alnair_cuda_kernel) == 272, "cuda kernel entry is 272 bytes");
_Static_assert(sizeof(struct alnair_cuda_kernels) == 26144, "cuda kernel table is 26144 bytes");
_Static_assert(sizeof(struct alnair_cuda_record) == 46720, "cuda record is 46720 bytes");
_Static_assert(sizeof(struct alnair_python_record) == 4224, "python record is 4224 bytes");
_Static_assert(sizeof(struct alnair_share_busy) == 72, "share busy timeline is 72 bytes");
_Static_assert(sizeof(struct alnair_share_table) == 5120, "share table is 5120 bytes");
#endif

#ifdef __cplusplus
}
#endif

#endif /* ALNAIR_SHM_H */
