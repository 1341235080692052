/* alloc_table.c - see alloc_table.h. */
#include "alloc_table.h"

#include <stdlib.h>
#include <string.h>

#define N_BUCKETS (ALLOC_TABLE_STRIPES * 64)

struct alloc_entry {
    uint64_t key;
    uint64_t size;
    int device;
    struct alloc_entry *next;
};

static size_t bucket_of(uint64_t key)
{
    key ^= key >> 33; /* device pointers share their low bits: mix before masking */
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)(key % N_BUCKETS);
}

static pthread_mutex_t *lock_of(struct alloc_table *t, size_t bucket)
{
    return &t->locks[bucket % ALLOC_TABLE_STRIPES];
}

void alloc_table_init(struct alloc_table *t)
{
    for (int i = 0; i < ALLOC_TABLE_STRIPES; i++) pthread_mutex_init(&t->locks[i], NULL);
    memset(t->buckets, 0, sizeof t->buckets);
}

int alloc_table_insert(struct alloc_table *t, uint64_t key, uint64_t size, int device)
{
    struct alloc_entry *e = malloc(sizeof *e);
    if (!e) return -1;
    size_t b = bucket_of(key);
    e->key = key;
    e->size = size;
    e->device = device;
    pthread_mutex_lock(lock_of(t, b));
    e->next = t->buckets[b];
    t->buckets[b] = e;
    pthread_mutex_unlock(lock_of(t, b));
    return 0;
}

int alloc_table_find(struct alloc_table *t, uint64_t key, int *device)
{
    size_t b = bucket_of(key);
    int found = 0;
    pthread_mutex_lock(lock_of(t, b));
    for (struct alloc_entry *e = t->buckets[b]; e && !found; e = e->next)
        if (e->key == key) *device = e->device, found = 1;
    pthread_mutex_unlock(lock_of(t, b));
    return found;
}

int alloc_table_remove(struct alloc_table *t, uint64_t key, uint64_t *size, int *device)
{
    size_t b = bucket_of(key);
    struct alloc_entry *found = NULL;
    pthread_mutex_lock(lock_of(t, b));
    for (struct alloc_entry **p = &t->buckets[b]; *p; p = &(*p)->next) {
        if ((*p)->key == key) {
            found = *p;
            *p = found->next;
            break;
        }
    }
    pthread_mutex_unlock(lock_of(t, b));
    if (!found) return 0;
    *size = found->size;
    *device = found->device;
    free(found);
    return 1;
}

void alloc_table_lock_all(struct alloc_table *t)
{
    for (int i = 0; i < ALLOC_TABLE_STRIPES; i++) pthread_mutex_lock(&t->locks[i]);
}

void alloc_table_unlock_all(struct alloc_table *t)
{
    for (int i = ALLOC_TABLE_STRIPES - 1; i >= 0; i--) pthread_mutex_unlock(&t->locks[i]);
}

/* The child owns none of the parent's device memory. Its forking thread holds
 * every lock (taken in prepare); entries are leaked rather than freed, since
 * another thread of the parent may have been inside malloc. */
void alloc_table_reset_in_child(struct alloc_table *t)
{
    memset(t->buckets, 0, sizeof t->buckets);
    alloc_table_unlock_all(t);
}
