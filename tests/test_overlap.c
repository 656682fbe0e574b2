/*
 * test_overlap.c — the aliasing decisions, checked against brute force: for random small views,
 * enumerate every element address and compare with rp_tensors_overlap / rp_tensor_self_overlaps.
 * A false "no overlap" would let a call corrupt memory, so it must never happen; a false
 * "overlap" would refuse a valid layout, so it must not happen on views with equal strides.
 */
#include "test_util.h"

#include "overlap.h"

static test_rng rng = {77};

static rp_tensor view(int64_t base, int ndim, const int64_t *shape, const int64_t *strides)
{
    rp_tensor t = {0};
    t.data = (void *)(uintptr_t)(0x100000 + base * 4); /* never dereferenced */
    t.dtype = RP_F32;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t.shape[i] = shape[i];
        t.strides[i] = strides[i];
    }
    return t;
}

/* Element offsets (in elements, relative to 0x100000) of every element of t. */
static int64_t offsets(const rp_tensor *t, int64_t *out)
{
    int64_t n = 0, idx[RP_MAX_DIMS] = {0};
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0)
            return 0;
    for (;;) {
        int64_t off = ((int64_t)(uintptr_t)t->data - 0x100000) / 4;
        for (int i = 0; i < t->ndim; i++)
            off += idx[i] * t->strides[i];
        out[n++] = off;
        int d = t->ndim - 1;
        while (d >= 0 && ++idx[d] == t->shape[d])
            idx[d--] = 0;
        if (d < 0)
            return n;
    }
}

static int brute_overlap(const rp_tensor *a, const rp_tensor *b)
{
    static int64_t oa[4096], ob[4096];
    int64_t na = offsets(a, oa), nb = offsets(b, ob);
    for (int64_t i = 0; i < na; i++)
        for (int64_t j = 0; j < nb; j++)
            if (oa[i] == ob[j])
                return 1;
    return 0;
}

static int brute_self_overlap(const rp_tensor *a)
{
    static int64_t oa[4096];
    int64_t na = offsets(a, oa);
    for (int64_t i = 0; i < na; i++)
        for (int64_t j = i + 1; j < na; j++)
            if (oa[i] == oa[j])
                return 1;
    return 0;
}

static void test_equal_stride_views_decided_exactly(void)
{
    int cases = 0, overlapping = 0;
    for (int iter = 0; iter < 20000; iter++) {
        int ndim = 1 + (int)(rng_next(&rng) % 3);
        int64_t sa[3], sb[3], st[3];
        for (int i = 0; i < ndim; i++) {
            sa[i] = (int64_t)(rng_next(&rng) % 5);
            sb[i] = (int64_t)(rng_next(&rng) % 5);
            st[i] = (int64_t)(rng_next(&rng) % 40) - 10;
        }
        rp_tensor a = view(0, ndim, sa, st), b = view((int64_t)(rng_next(&rng) % 120) - 60, ndim, sb, st);
        int want = brute_overlap(&a, &b), got = rp_tensors_overlap(&a, &b);
        CHECK(got == want, "iter %d: overlap %d, brute force %d", iter, got, want);
        cases++;
        overlapping += want;
        if (test_failures > 5)
            return;
    }
    printf("  %d cases, %d overlapping\n", cases, overlapping);
}

static void test_different_strides_never_miss_an_overlap(void)
{
    for (int iter = 0; iter < 20000; iter++) {
        int ndim = 1 + (int)(rng_next(&rng) % 3);
        int64_t sa[3], sb[3], ta[3], tb[3];
        for (int i = 0; i < ndim; i++) {
            sa[i] = (int64_t)(rng_next(&rng) % 5);
            sb[i] = (int64_t)(rng_next(&rng) % 5);
            ta[i] = (int64_t)(rng_next(&rng) % 30) - 8;
            tb[i] = (int64_t)(rng_next(&rng) % 30) - 8;
        }
        rp_tensor a = view(0, ndim, sa, ta), b = view((int64_t)(rng_next(&rng) % 100) - 50, ndim, sb, tb);
        if (brute_overlap(&a, &b))
            CHECK(rp_tensors_overlap(&a, &b), "iter %d: missed an overlap", iter);
        if (test_failures > 5)
            return;
    }
}

/* Views whose strides differ but whose dense inner dimensions merge into the same strides (k
 * [T, H, Da] and v [T, H, Db] side by side in rows of W elements) are decided exactly too. */
static void test_views_that_collapse_to_equal_strides_decided_exactly(void)
{
    int overlapping = 0;
    for (int iter = 0; iter < 20000; iter++) {
        const int64_t T = 1 + (int64_t)(rng_next(&rng) % 4), H = 1 + (int64_t)(rng_next(&rng) % 3);
        const int64_t da = 1 + (int64_t)(rng_next(&rng) % 5), db = 1 + (int64_t)(rng_next(&rng) % 5);
        const int64_t W = H * (da > db ? da : db) + (int64_t)(rng_next(&rng) % 6);
        int64_t sa[3] = {T, H, da}, sb[3] = {T, H, db}, ta[3] = {W, da, 1}, tb[3] = {W, db, 1};
        rp_tensor a = view(0, 3, sa, ta), b = view((int64_t)(rng_next(&rng) % (2 * W)) - W, 3, sb, tb);
        const int want = brute_overlap(&a, &b), got = rp_tensors_overlap(&a, &b);
        overlapping += want;
        CHECK(got == want, "iter %d: overlap %d, brute force %d", iter, got, want);
        if (test_failures > 5)
            return;
    }
    printf("  %d overlapping\n", overlapping);
}

static void test_self_overlap_decided_exactly(void)
{
    for (int iter = 0; iter < 20000; iter++) {
        int ndim = 1 + (int)(rng_next(&rng) % 3);
        int64_t s[3], t[3];
        for (int i = 0; i < ndim; i++) {
            s[i] = (int64_t)(rng_next(&rng) % 6);
            t[i] = (int64_t)(rng_next(&rng) % 24) - 8;
        }
        rp_tensor a = view(0, ndim, s, t);
        CHECK(rp_tensor_self_overlaps(&a) == brute_self_overlap(&a), "iter %d: self overlap %d, brute %d",
              iter, rp_tensor_self_overlaps(&a), brute_self_overlap(&a));
        if (test_failures > 5)
            return;
    }
}

static void test_real_layouts(void)
{
    /* k and v interleaved as [P, 2, Hk, D]: disjoint. */
    const int64_t P = 1000, Hk = 8, D = 128;
    int64_t shape[3] = {P, Hk, D}, strides[3] = {2 * Hk * D, D, 1};
    rp_tensor k = view(0, 3, shape, strides), v = view(Hk * D, 3, shape, strides);
    CHECK(!rp_tensors_overlap(&k, &v), "interleaved k/v pools reported overlapping");
    /* ... but shifted by one element they do overlap. */
    rp_tensor v1 = view(Hk * D - 1, 3, shape, strides);
    CHECK(rp_tensors_overlap(&k, &v1), "shifted interleave not caught");
    /* q and k slices of a fused [T, (Hq + 2Hk) * D] projection. */
    const int64_t T = 4096, Hq = 32, W = (Hq + 2 * Hk) * D;
    int64_t qs[3] = {T, Hq, D}, ks[3] = {T, Hk, D}, st[3] = {W, D, 1};
    rp_tensor q = view(0, 3, qs, st), kk = view(Hq * D, 3, ks, st), vv = view((Hq + Hk) * D, 3, ks, st);
    CHECK(!rp_tensors_overlap(&q, &kk) && !rp_tensors_overlap(&kk, &vv) && !rp_tensors_overlap(&q, &vv),
          "fused QKV slices reported overlapping");
    /* k [T, Hk, D] and a wider v [T, Hk, 2D] (v_head_dim != head_dim) side by side: disjoint. */
    int64_t vs[3] = {T, Hk, 2 * D}, vst[3] = {W + Hk * D, 2 * D, 1}, kst[3] = {W + Hk * D, D, 1};
    rp_tensor k_mla = view(Hq * D, 3, ks, kst), v_mla = view((Hq + Hk) * D, 3, vs, vst);
    CHECK(!rp_tensors_overlap(&k_mla, &v_mla), "k and a wider v side by side reported overlapping");
    rp_tensor v_mla_early = view((Hq + Hk) * D - 1, 3, vs, vst);
    CHECK(rp_tensors_overlap(&k_mla, &v_mla_early), "a wider v one element early must overlap k");
    rp_tensor q_wide = view(0, 3, (int64_t[3]){T, Hq + 1, D}, st);
    CHECK(rp_tensors_overlap(&q_wide, &kk), "a q one head too wide must overlap k");
    /* Layers of a [L, P, Hk, D] cache. */
    int64_t ls[3] = {Hk * D, D, 1};
    rp_tensor layer0 = view(0, 3, shape, ls), layer1 = view(P * Hk * D, 3, shape, ls);
    CHECK(!rp_tensors_overlap(&layer0, &layer1), "adjacent layers reported overlapping");
    /* Huge strides do not overflow the search. */
    int64_t hs[3] = {3, 2, 2}, hst[3] = {INT64_MAX / 64, 1 << 30, 1};
    rp_tensor h1 = view(0, 3, hs, hst), h2 = view(1, 3, hs, hst);
    (void)rp_tensors_overlap(&h1, &h2);
    CHECK(!rp_tensor_self_overlaps(&layer0), "a contiguous tensor self-overlaps");
}

int main(void)
{
    RUN(test_equal_stride_views_decided_exactly);
    RUN(test_different_strides_never_miss_an_overlap);
    RUN(test_views_that_collapse_to_equal_strides_decided_exactly);
    RUN(test_self_overlap_decided_exactly);
    RUN(test_real_layouts);
    return test_summary("test_overlap");
}
