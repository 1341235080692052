/*
 * hook_registry.c - how programs reach our wrappers: the table of hooked entry
 * points, the dlsym override, and the cuGetProcAddress wrappers. The top layer:
 * it hands out the hooks; where the real functions live is driver.c's.
 *
 * Programs reach the driver three ways: by linking libcuda (our exported symbols
 * interpose), by dlsym on a libcuda handle (our dlsym answers with wrappers), and
 * through cuGetProcAddress, which the CUDA runtime uses for nearly everything.
 * For the last, we forward the query to the driver unchanged (so cudaVersion and
 * flags keep their exact meaning) and swap the answer for the wrapper of the
 * variant the driver chose (cuMemAlloc -> cuMemAlloc_v2, _ptsz ...).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <string.h>

#include "intercept.h"

/* Our exported wrappers, declared from the table. */
#define DECLARE_WRAPPER(name, params, args) CUresult name params;
ALNAIR_HOOKS(DECLARE_WRAPPER)
#undef DECLARE_WRAPPER

struct hook {
    const char *name;
    void *wrapper;
    void **real_slot;
};

#define HOOK_ROW(name, params, args) {#name, (void *)name, (void **)&alnair_real.name},
static const struct hook hooks[] = {ALNAIR_HOOKS(HOOK_ROW)};
#undef HOOK_ROW
#define N_HOOKS (sizeof hooks / sizeof hooks[0])

static const struct hook *hook_by_name(const char *name)
{
    if (name[0] != 'c' || name[1] != 'u') return NULL;
    for (size_t i = 0; i < N_HOOKS; i++)
        if (strcmp(hooks[i].name, name) == 0) return &hooks[i];
    return NULL;
}

/* Records where the real `h` lives, unless the answer is our own wrapper. */
static void remember_real(const struct hook *h, void *sym)
{
    if (sym && sym != h->wrapper && !__atomic_load_n(h->real_slot, __ATOMIC_ACQUIRE))
        __atomic_store_n(h->real_slot, sym, __ATOMIC_RELEASE);
}

/* The wrapper for a driver pointer cuGetProcAddress returned, or NULL. */
static void *wrapper_for_driver_pointer(void *fn)
{
    for (size_t i = 0; i < N_HOOKS; i++) {
        void *real = __atomic_load_n(hooks[i].real_slot, __ATOMIC_ACQUIRE);
        if (!real) real = alnair_resolve_real(hooks[i].name, hooks[i].real_slot);
        if (real == fn) return hooks[i].wrapper;
    }
    return NULL;
}

/* RTLD_NEXT means "after the caller"; the caller of the real dlsym would be us,
 * so search the objects after the caller's ourselves (public dl* calls only). */
static void *next_symbol_after(const void *caller, const char *name)
{
    Dl_info info;
    struct link_map *map = NULL;
    if (!dladdr1(caller, &info, (void **)&map, RTLD_DL_LINKMAP) || !map) return NULL;
    for (struct link_map *l = map->l_next; l; l = l->l_next) {
        void *h = dlopen(l->l_name[0] ? l->l_name : NULL, RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        void *sym = alnair_real_dlsym()(h, name);
        dlclose(h);
        if (sym) return sym;
    }
    return NULL;
}

ALNAIR_EXPORT void *dlsym(void *handle, const char *name)
{
    if (handle == RTLD_NEXT) return next_symbol_after(__builtin_return_address(0), name);
    void *sym = alnair_real_dlsym()(handle, name);
    if (!sym || !alnair_active()) return sym;
    const struct hook *h = hook_by_name(name);
    if (!h) return sym;
    remember_real(h, sym);
    return h->wrapper;
}

/* Swaps the driver's answer for our wrapper when we wrap that variant. */
static void substitute_wrapper(CUresult r, void **pfn)
{
    if (r != CUDA_SUCCESS || !pfn || !*pfn) return;
    void *wrapper = wrapper_for_driver_pointer(*pfn);
    if (wrapper) *pfn = wrapper;
}

ALNAIR_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    cuGetProcAddress_fn real = REAL(cuGetProcAddress);
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    if (alnair_active()) substitute_wrapper(r, pfn);
    return r;
}

ALNAIR_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                           CUdriverProcAddressQueryResult *symbolStatus)
{
    cuGetProcAddress_v2_fn real = REAL(cuGetProcAddress_v2);
    if (!real) return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (alnair_active()) substitute_wrapper(r, pfn);
    return r;
}
