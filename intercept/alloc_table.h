/*
 * alloc_table.h - what each live allocation added, so its free subtracts exactly
 * that from the right device. Allocation is not a hot path; striped locks suffice.
 */
#ifndef ALNAIR_ALLOC_TABLE_H
#define ALNAIR_ALLOC_TABLE_H

#include <pthread.h>
#include <stdint.h>

#define ALLOC_TABLE_STRIPES 64

struct alloc_entry;

struct alloc_table {
    pthread_mutex_t locks[ALLOC_TABLE_STRIPES];
    struct alloc_entry *buckets[ALLOC_TABLE_STRIPES * 64];
};

void alloc_table_init(struct alloc_table *t);
/* Returns 0, or -1 if out of host memory (the allocation is then not tracked). */
int alloc_table_insert(struct alloc_table *t, uint64_t key, uint64_t size, int device);
/* Returns 1 and key's device if it is there. */
int alloc_table_find(struct alloc_table *t, uint64_t key, int *device);
/* Removes key; returns 1 and its size and device if it was there. */
int alloc_table_remove(struct alloc_table *t, uint64_t key, uint64_t *size, int *device);
/* Fork: hold every lock across fork; the child then forgets every entry. */
void alloc_table_lock_all(struct alloc_table *t);
void alloc_table_unlock_all(struct alloc_table *t);
void alloc_table_reset_in_child(struct alloc_table *t);

#endif
