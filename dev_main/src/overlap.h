/*
 * overlap.h — memory extents and aliasing of strided tensors (see overlap.c).
 */
#ifndef RP_OVERLAP_H
#define RP_OVERLAP_H

#include "ropepool.h"

#include <stdint.h>

/* Bytes [begin, end) that a tensor's elements occupy. */
typedef struct rp_extent {
    uintptr_t begin, end;
} rp_extent;

/* 1 if some dimension has extent 0. */
int rp_tensor_is_empty(const rp_tensor *t);

/* Fills *out for a non-empty tensor; 0 if the byte offsets overflow 64 bits or the address space. */
int rp_tensor_extent(const rp_tensor *t, rp_extent *out);

/* 1 if a and b may share a byte (exact for views with equal strides, conservative otherwise). */
int rp_tensors_overlap(const rp_tensor *a, const rp_tensor *b);

/* 1 if two different indices of t may address the same element. */
int rp_tensor_self_overlaps(const rp_tensor *t);

#endif /* RP_OVERLAP_H */
