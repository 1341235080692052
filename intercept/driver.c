/*
 * driver.c - the real driver: where each of its functions lives, resolved once
 * on first use, and the C library's own dlsym. The bottom layer: it calls no
 * other part of the intercept, so every part may call it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>

#include "intercept.h"

struct alnair_real_fns alnair_real;

static alnair_dlsym_fn real_dlsym;

/* glibc >= 2.34 versions dlsym GLIBC_2.34; older ones GLIBC_2.2.5 (x86-64) or 2.17 (arm64). */
static void find_real_dlsym(void)
{
    static const char *versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && !real_dlsym; i++)
        real_dlsym = (alnair_dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
}

alnair_dlsym_fn alnair_real_dlsym(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, find_real_dlsym);
    return real_dlsym;
}

/* Whether `sym` is defined in this library: a wrapper of ours, never the driver's function. */
static int ours(void *sym)
{
    Dl_info mine, its;
    return dladdr((void *)ours, &mine) && dladdr(sym, &its) && its.dli_fbase == mine.dli_fbase;
}

/* The driver's own definition of `name`: from the loaded libcuda.so.1, else the
 * next object after us in the lookup order, never our own wrapper. */
static void *driver_symbol(const char *name)
{
    void *libcuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    void *sym = NULL;
    if (libcuda) {
        sym = alnair_real_dlsym()(libcuda, name);
        dlclose(libcuda);
    }
    if (!sym) sym = alnair_real_dlsym()(RTLD_NEXT, name);
    return sym && ours(sym) ? NULL : sym;
}

void *alnair_resolve_real(const char *name, void **slot)
{
    void *sym = driver_symbol(name);
    if (sym) __atomic_store_n(slot, sym, __ATOMIC_RELEASE);
    return sym;
}
