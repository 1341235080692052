/*
 * kernel_names.c - see kernel_names.h. The launch path's side is the slot claim below; the rest runs on the
 * monitor thread under the publisher's lock, so its state needs no lock of its own.
 *
 * Rows are cumulative counters, and so is each device's OTHER row: at each publish it grows by the new launches
 * of the slots whose kernels are not named then (and of launches that found no slot). A kernel that joins the
 * named rows brings its whole count (the launches it made before joining stay in OTHER too); one that leaves adds
 * to OTHER from then on. A named row only gives way to a kernel with an eighth more launches, so rows do not flap
 * between near-equals. Every figure of a publish comes from one pass over the slots, so OTHER never goes down.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "intercept.h"

#define MAX_NAMES 4096 /* distinct names a process keeps; later ones count as unnamed */
#define UNNAMED 0      /* names[0]: "" */

void alnair_kernel_count_slow(struct alnair_kernel_table *table, uintptr_t function)
{
    unsigned start = alnair_kernel_slot_of(function);
    for (unsigned probe = 0; probe < 16; probe++) {
        unsigned i = (start + probe) & (ALNAIR_KERNEL_SLOTS - 1);
        if (i == 0 || !function) continue; /* slot 0 and the NULL handle: see kernel_names.h */
        uintptr_t seen = atomic_load_explicit(&table->functions[i], memory_order_relaxed);
        if (!seen && atomic_compare_exchange_strong_explicit(&table->functions[i], &seen, function,
                                                             memory_order_relaxed, memory_order_relaxed))
            seen = function;
        if (seen == function) {
            atomic_fetch_add_explicit(&table->launches[i], 1, memory_order_relaxed);
            return;
        }
    }
    atomic_fetch_add_explicit(&table->unslotted, 1, memory_order_relaxed); /* counted in OTHER only */
}

uint64_t alnair_kernel_launches(struct alnair_kernel_table *table)
{
    uint64_t sum = atomic_load_explicit(&table->unslotted, memory_order_relaxed);
    for (unsigned i = 0; i < ALNAIR_KERNEL_SLOTS; i++) sum += atomic_load_explicit(&table->launches[i], memory_order_relaxed);
    return sum;
}

/* ---- monitor thread ------------------------------------------------------------------------------------------ */

static char *names[MAX_NAMES] = {""};
static uint32_t name_count = 1;
struct device_names {
    uint32_t slot_name[ALNAIR_KERNEL_SLOTS]; /* 1 + the slot's name id; 0: not named yet */
    uint64_t *last;                          /* each name's launches at the last publish, by name id */
    uint64_t launches_seen;                  /* the device's kernel launches at the last publish */
    uint64_t other;                          /* the OTHER row */
};
static struct device_names *devices[ALNAIR_CUDA_MAX_DEVICES];

struct row {
    int ordinal;
    uint32_t name;
    uint64_t launches;
};
static struct row named[ALNAIR_KERNEL_NAMES_TOP_MAX];
static int named_count;

static uint32_t intern(const char *name)
{
    for (uint32_t i = 0; i < name_count; i++)
        if (!strcmp(names[i], name)) return i;
    if (name_count == MAX_NAMES) return UNNAMED;
    char *copy = strdup(name);
    if (!copy) return UNNAMED;
    names[name_count] = copy;
    return name_count++;
}

/* A label-safe copy of at most ALNAIR_CUDA_KERNEL_NAME_LEN - 1 bytes: control bytes become '?'. */
static void bounded(const char *name, char out[ALNAIR_CUDA_KERNEL_NAME_LEN])
{
    size_t n = 0;
    for (; name[n] && n < ALNAIR_CUDA_KERNEL_NAME_LEN - 1; n++)
        out[n] = (unsigned char)name[n] < 0x20 || name[n] == 0x7f ? '?' : name[n];
    out[n] = 0;
}

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

/* The C++ runtime's demangler, if the process has loaded one (any PyTorch or CUDA C++ program has). Python loads
 * extension modules, and with them libstdc++, RTLD_LOCAL: its symbols are not in the global scope, so the library
 * is asked for by name too, never loaded here (RTLD_NOLOAD). */
static demangle_fn demangler(void)
{
    static demangle_fn found;
    if (!found) *(void **)&found = alnair_real_dlsym()(RTLD_DEFAULT, "__cxa_demangle");
    if (!found) {
        void *cxx = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
        if (cxx) {
            *(void **)&found = alnair_real_dlsym()(cxx, "__cxa_demangle");
            dlclose(cxx); /* only the reference NOLOAD took: the library stays loaded by whoever loaded it */
        }
    }
    return found;
}

static uint32_t name_of(uintptr_t function)
{
    const char *raw = NULL;
    cuFuncGetName_fn func_name = REAL(cuFuncGetName);
    cuKernelGetName_fn kernel_name = REAL(cuKernelGetName);
    if (!(func_name && func_name(&raw, (CUfunction)function) == CUDA_SUCCESS && raw) &&
        !(kernel_name && kernel_name(&raw, (CUkernel)function) == CUDA_SUCCESS && raw))
        return UNNAMED;
    char *demangled = NULL;
    int status = -1;
    demangle_fn demangle = raw[0] == '_' && raw[1] == 'Z' ? demangler() : NULL;
    if (demangle) demangled = demangle(raw, NULL, NULL, &status);
    char label[ALNAIR_CUDA_KERNEL_NAME_LEN];
    bounded(status == 0 && demangled ? demangled : raw, label);
    free(demangled);
    return intern(label);
}

static struct device_names *device_names(int ordinal)
{
    if (!devices[ordinal]) {
        struct device_names *d = calloc(1, sizeof *d);
        if (d && !(d->last = calloc(MAX_NAMES, sizeof *d->last))) free(d), d = NULL;
        devices[ordinal] = d;
    }
    return devices[ordinal];
}

/* Each name's launches on the device now, by name id, new handles named first; returns the device's launches, read
 * in the same pass (slot 0's and those of handles not named yet count in it, and so in OTHER). */
static uint64_t launches_by_name(int ordinal, struct device_names *d, uint64_t *by_name, int exiting)
{
    struct alnair_kernel_table *table = &alnair.devices[ordinal].kernels;
    uint64_t total = atomic_load_explicit(&table->unslotted, memory_order_relaxed);
    memset(by_name, 0, name_count * sizeof *by_name);
    for (unsigned i = 0; i < ALNAIR_KERNEL_SLOTS; i++) {
        uint64_t launches = atomic_load_explicit(&table->launches[i], memory_order_relaxed);
        uintptr_t function = atomic_load_explicit(&table->functions[i], memory_order_relaxed);
        total += launches;
        if (!function) continue;
        if (!d->slot_name[i] && !exiting) d->slot_name[i] = 1 + name_of(function);
        if (d->slot_name[i]) by_name[d->slot_name[i] - 1] += launches;
    }
    return total;
}

static int named_at(int ordinal, uint32_t name)
{
    for (int i = 0; i < named_count; i++)
        if (named[i].ordinal == ordinal && named[i].name == name) return i;
    return -1;
}

/* Offers a candidate to the new top rows (kept by launches, most first); a row named now counts an eighth more. */
static void offer(struct row *top, int *count, int limit, struct row candidate, int was_named)
{
    uint64_t score = candidate.launches + (was_named ? candidate.launches / 8 : 0);
    int at = *count;
    while (at > 0) {
        const struct row *r = &top[at - 1];
        uint64_t other_score = r->launches + (named_at(r->ordinal, r->name) >= 0 ? r->launches / 8 : 0);
        if (other_score >= score) break;
        at--;
    }
    if (at >= limit) return;
    int last = *count < limit ? *count : limit - 1;
    memmove(&top[at + 1], &top[at], (size_t)(last - at) * sizeof *top);
    top[at] = candidate;
    if (*count < limit) (*count)++;
}

/* Each device's launches by name, into new top rows and the OTHER sums; total[k]: device ordinals[k]'s launches. */
static void rank(const int *ordinals, int count, int exiting, uint64_t *total)
{
    static uint64_t by_name[ALNAIR_CUDA_MAX_DEVICES][MAX_NAMES];
    struct row top[ALNAIR_KERNEL_NAMES_TOP_MAX];
    int top_count = 0, limit = alnair.kernel_names_top;
    for (int k = 0; k < count; k++) {
        int o = ordinals[k];
        struct device_names *d = device_names(o);
        if (!d) { /* no memory for its names: its launches still count */
            total[k] = alnair_kernel_launches(&alnair.devices[o].kernels);
            continue;
        }
        total[k] = launches_by_name(o, d, by_name[o], exiting);
        for (uint32_t n = 0; limit && n < name_count; n++)
            if (by_name[o][n]) offer(top, &top_count, limit, (struct row){o, n, by_name[o][n]}, named_at(o, n) >= 0);
    }
    memcpy(named, top, (size_t)top_count * sizeof *top);
    named_count = top_count;
    for (int k = 0; k < count; k++) {
        int o = ordinals[k];
        struct device_names *d = devices[o];
        if (!d) continue;
        uint64_t added = total[k] - d->launches_seen; /* every slot's new launches: none is negative */
        for (int i = 0; i < named_count; i++)
            if (named[i].ordinal == o) added -= by_name[o][named[i].name] - d->last[named[i].name];
        d->other += added;
        d->launches_seen = total[k];
        memcpy(d->last, by_name[o], name_count * sizeof *d->last);
    }
}

void alnair_kernel_names_publish(struct alnair_cuda_kernels *out, const int *ordinals, int count, int exiting,
                                 uint64_t *launches)
{
    rank(ordinals, count, exiting, launches);
    uint32_t n = 0;
    for (int i = 0; i < named_count; i++, n++) {
        struct alnair_cuda_kernel *k = &out->kernels[n];
        memset(k->name, 0, sizeof k->name);
        strcpy(k->name, names[named[i].name]);
        k->launches = named[i].launches;
        k->device_index = (uint32_t)named[i].ordinal;
        k->flags = 0;
    }
    for (int i = 0; i < count && n < ALNAIR_CUDA_MAX_KERNELS; i++) {
        if (!devices[ordinals[i]]) continue;
        struct alnair_cuda_kernel *k = &out->kernels[n++];
        memset(k->name, 0, sizeof k->name);
        k->launches = devices[ordinals[i]]->other;
        k->device_index = (uint32_t)ordinals[i];
        k->flags = ALNAIR_CUDA_KERNEL_OTHER;
    }
    out->count = n;
}

/* The child counts afresh (state.c clears the slots); the names stay valid. */
static void fork_child(void)
{
    for (int i = 0; i < ALNAIR_CUDA_MAX_DEVICES; i++) {
        if (!devices[i]) continue;
        uint64_t *last = devices[i]->last;
        memset(devices[i], 0, sizeof *devices[i]);
        memset(last, 0, MAX_NAMES * sizeof *last);
        devices[i]->last = last;
    }
    named_count = 0;
}
ALNAIR_ON_FORK(kernel_names_fork, NULL, NULL, fork_child);
