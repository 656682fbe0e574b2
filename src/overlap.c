/*
 * overlap.c — do two strided tensors share an element? Does one tensor name an element twice?
 *
 * Comparing byte ranges alone would reject real layouts: k and v pools interleaved as
 * [P, 2, Hk, D], or q_rot = q and k_rot = k as in-place slices of one fused QKV buffer, have
 * intersecting ranges but disjoint elements. So when two views share their element size and
 * strides (after dense inner dimensions are merged: k [T, Hk, D] beside a wider v [T, Hk, Dv] in
 * one row buffer), we decide exactly whether some difference of indices d (|d_i| bounded by the shapes)
 * satisfies sum(d_i * stride_i) = offset between the two bases: a small search over dimensions
 * from the largest stride down, where each level admits only the few d_i that the inner
 * dimensions can still compensate. Views we cannot decide cheaply are reported as overlapping —
 * a false alarm is an error message, a missed overlap is corrupted memory.
 */
#include "overlap.h"

#include <stdlib.h>

typedef __int128 i128;

enum { RP_MAX_CANDIDATES = 64 };

typedef struct lattice {
    int n;
    int64_t stride[RP_MAX_DIMS]; /* > 0, sorted descending */
    int64_t lo[RP_MAX_DIMS];     /* d_i in [lo_i, hi_i] */
    int64_t hi[RP_MAX_DIMS];
    i128 inner_min[RP_MAX_DIMS + 1]; /* sum over j >= i of lo_j * stride_j */
    i128 inner_max[RP_MAX_DIMS + 1];
} lattice;

static i128 floor_div(i128 a, i128 b) /* b > 0 */
{
    i128 q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

static i128 ceil_div(i128 a, i128 b) /* b > 0 */
{
    i128 q = a / b;
    return (a % b != 0 && a > 0) ? q + 1 : q;
}

/* 1: some d with d_level.. in range solves sum = rem (and, if need_nonzero, d != 0 overall);
 * 0: none; -1: too many candidates to decide. */
static int search(const lattice *L, int level, i128 rem, int need_nonzero)
{
    if (level == L->n)
        return rem == 0 && !need_nonzero;
    const i128 s = L->stride[level];
    i128 first = ceil_div(rem - L->inner_max[level + 1], s);
    i128 last = floor_div(rem - L->inner_min[level + 1], s);
    if (first < L->lo[level]) first = L->lo[level];
    if (last > L->hi[level]) last = L->hi[level];
    if (last - first >= RP_MAX_CANDIDATES)
        return -1;
    int undecided = 0;
    for (i128 d = first; d <= last; d++) {
        int r = search(L, level + 1, rem - d * s, need_nonzero && d == 0);
        if (r == 1)
            return 1;
        undecided |= r < 0;
    }
    return undecided ? -1 : 0;
}

static int cmp_desc(const void *x, const void *y)
{
    const int64_t *a = x, *b = y; /* rows of {stride, lo, hi} */
    return (a[0] < b[0]) - (a[0] > b[0]);
}

/* Builds the lattice of index differences between views with shapes a and b and common strides.
 * d_i ranges over [-(b_i - 1), a_i - 1]; negative strides are folded by flipping d_i. Dimensions
 * that cannot move (stride 0, or both extents 1) drop out. */
static void build_lattice(lattice *L, int ndim, const int64_t *stride, const int64_t *shape_a,
                          const int64_t *shape_b)
{
    int64_t rows[RP_MAX_DIMS][3];
    int n = 0;
    for (int i = 0; i < ndim; i++) {
        int64_t lo = -(shape_b[i] - 1), hi = shape_a[i] - 1, s = stride[i];
        if (s == 0 || (lo == 0 && hi == 0))
            continue;
        if (s < 0) {
            int64_t t = lo;
            lo = -hi;
            hi = -t;
            s = -s;
        }
        rows[n][0] = s;
        rows[n][1] = lo;
        rows[n][2] = hi;
        n++;
    }
    qsort(rows, (size_t)n, sizeof rows[0], cmp_desc);
    L->n = n;
    L->inner_min[n] = L->inner_max[n] = 0;
    for (int i = n - 1; i >= 0; i--) {
        L->stride[i] = rows[i][0];
        L->lo[i] = rows[i][1];
        L->hi[i] = rows[i][2];
        L->inner_min[i] = L->inner_min[i + 1] + (i128)rows[i][1] * rows[i][0];
        L->inner_max[i] = L->inner_max[i + 1] + (i128)rows[i][2] * rows[i][0];
    }
}

int rp_tensor_is_empty(const rp_tensor *t)
{
    for (int i = 0; i < t->ndim && i < RP_MAX_DIMS; i++)
        if (t->shape[i] == 0)
            return 1;
    return 0;
}

int rp_tensor_extent(const rp_tensor *t, rp_extent *out)
{
    const int64_t elem = (int64_t)rp_dtype_size((rp_dtype)t->dtype);
    int64_t lo = 0, hi = 0; /* element offsets of the first and last element reachable */
    for (int i = 0; i < t->ndim && i < RP_MAX_DIMS; i++) {
        int64_t reach;
        if (t->shape[i] <= 0)
            continue;
        if (t->shape[i] > 1 && t->strides[i] == INT64_MIN)
            return 0; /* a step of 2^63 elements: no address space has it, and -stride overflows */
        if (__builtin_mul_overflow(t->shape[i] - 1, t->strides[i], &reach))
            return 0;
        if (reach < 0 ? __builtin_add_overflow(lo, reach, &lo) : __builtin_add_overflow(hi, reach, &hi))
            return 0;
    }
    int64_t lo_bytes, hi_bytes;
    if (__builtin_add_overflow(hi, 1, &hi) || __builtin_mul_overflow(lo, elem, &lo_bytes) ||
        __builtin_mul_overflow(hi, elem, &hi_bytes))
        return 0;
    const uintptr_t base = (uintptr_t)t->data;
    const uintptr_t below = (uintptr_t)0 - (uintptr_t)lo_bytes; /* lo_bytes <= 0 < hi_bytes */
    if (below > base || (uintptr_t)hi_bytes > UINTPTR_MAX - base)
        return 0; /* the range would wrap around the address space */
    out->begin = base - below;
    out->end = base + (uintptr_t)hi_bytes;
    return 1;
}

static int same_strides(const rp_tensor *a, const rp_tensor *b)
{
    if (a->ndim != b->ndim || rp_dtype_size((rp_dtype)a->dtype) != rp_dtype_size((rp_dtype)b->dtype))
        return 0;
    for (int i = 0; i < a->ndim && i < RP_MAX_DIMS; i++)
        if (a->strides[i] != b->strides[i] && a->shape[i] > 1 && b->shape[i] > 1)
            return 0;
    return 1;
}

/* t with its dimensions of extent 1 dropped and each dimension merged into the one outside it
 * where together they step evenly (outer stride = extent * inner stride): the same elements, in
 * as few dimensions as they allow. k [T, Hk, D] and v [T, Hk, Dv] sliced side by side from one
 * row buffer then both become [T, Hk * D] / [T, Hk * Dv] with strides (row, 1): comparable. */
static rp_tensor collapsed(const rp_tensor *t)
{
    rp_tensor c = *t;
    int n = 0;
    for (int i = 0; i < t->ndim && i < RP_MAX_DIMS; i++) {
        if (t->shape[i] == 1)
            continue;
        int64_t step, extent;
        if (n > 0 && !__builtin_mul_overflow(t->shape[i], t->strides[i], &step) && c.strides[n - 1] == step &&
            !__builtin_mul_overflow(c.shape[n - 1], t->shape[i], &extent)) {
            c.shape[n - 1] = extent;
            c.strides[n - 1] = t->strides[i];
            continue;
        }
        c.shape[n] = t->shape[i];
        c.strides[n] = t->strides[i];
        n++;
    }
    c.ndim = n;
    return c;
}

int rp_tensors_overlap(const rp_tensor *a, const rp_tensor *b)
{
    rp_extent ea, eb;
    if (rp_tensor_is_empty(a) || rp_tensor_is_empty(b))
        return 0;
    if (!rp_tensor_extent(a, &ea) || !rp_tensor_extent(b, &eb))
        return 1;
    if (ea.end <= eb.begin || eb.end <= ea.begin)
        return 0;
    if (!same_strides(a, b)) {
        if (a->ndim > RP_MAX_DIMS || b->ndim > RP_MAX_DIMS)
            return 1;
        const rp_tensor ca = collapsed(a), cb = collapsed(b);
        return same_strides(&ca, &cb) ? rp_tensors_overlap(&ca, &cb) : 1;
    }
    const int64_t elem = (int64_t)rp_dtype_size((rp_dtype)a->dtype);
    const intptr_t delta = (intptr_t)((uintptr_t)b->data - (uintptr_t)a->data);
    if (delta % elem != 0)
        return 1; /* elements straddle each other */
    int64_t stride[RP_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) /* a dimension of extent 1 may carry any stride */
        stride[i] = a->shape[i] > 1 ? a->strides[i] : b->strides[i];
    lattice L;
    build_lattice(&L, a->ndim, stride, a->shape, b->shape);
    /* a[x] and b[y] coincide when sum(x_i s_i) = delta + sum(y_i s_i), i.e. d = x - y solves
     * sum(d_i s_i) = delta. */
    return search(&L, 0, (i128)(delta / elem), 0) != 0;
}

/* The common case, proved without the search: with the moving dimensions ordered by |stride|,
 * each stride exceeds the farthest offset all smaller ones reach together (a mixed-radix layout,
 * padded or permuted). 0 means "not proved", never "overlaps". */
static int strides_nest(const rp_tensor *t)
{
    int64_t stride[RP_MAX_DIMS], shape[RP_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim && i < RP_MAX_DIMS; i++) {
        if (t->shape[i] <= 1)
            continue;
        if (t->strides[i] == INT64_MIN)
            return 0;
        const int64_t s = t->strides[i] < 0 ? -t->strides[i] : t->strides[i];
        int j = n++;
        for (; j > 0 && stride[j - 1] > s; j--) { /* insertion sort, ascending */
            stride[j] = stride[j - 1];
            shape[j] = shape[j - 1];
        }
        stride[j] = s;
        shape[j] = t->shape[i];
    }
    int64_t reach = 0; /* largest offset the smaller dimensions span */
    for (int i = 0; i < n; i++) {
        int64_t span;
        if (stride[i] <= reach || __builtin_mul_overflow(stride[i], shape[i] - 1, &span) ||
            __builtin_add_overflow(reach, span, &reach))
            return 0;
    }
    return 1;
}

int rp_tensor_self_overlaps(const rp_tensor *t)
{
    rp_extent e;
    if (rp_tensor_is_empty(t))
        return 0;
    if (!rp_tensor_extent(t, &e))
        return 1;
    if (strides_nest(t))
        return 0;
    for (int i = 0; i < t->ndim && i < RP_MAX_DIMS; i++)
        if (t->strides[i] == 0 && t->shape[i] > 1)
            return 1;
    lattice L;
    build_lattice(&L, t->ndim, t->strides, t->shape, t->shape);
    return search(&L, 0, 0, 1) != 0;
}
