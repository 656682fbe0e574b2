/*
 * test_verify.h — what the CPU and GPU suites both check a finished call with: the float64
 * formula's bound (rp_ref_verify) on host copies, and the positions that stress range reduction.
 */
#ifndef RP_TEST_VERIFY_H
#define RP_TEST_VERIFY_H

#include "test_util.h"

#include "cpu/kernels.h"
#include "internal.h"
#include "ref/verify.h"

/* A suite run with ROPEPOOL_CPU=<level> (tests/CMakeLists.txt) must test that level: dispatch only
 * warns and runs a lower one when the CPU lacks it. Exits 77 (ctest's skip) in that case; a level
 * the CPU has that did not run is a failure. Call before the first kernel call. */
static inline void check_forced_level(void)
{
    const char *forced = getenv("ROPEPOOL_CPU");
    if (!forced || !*forced)
        return;
    if (!rp_cpu_level_supported(forced)) {
        printf("skip: ROPEPOOL_CPU=%s, which this CPU or build cannot run\n", forced);
        exit(77);
    }
    CHECK(strcmp(rp_cpu_kernel_name(), forced) == 0, "ROPEPOOL_CPU=%s but the %s kernels run", forced,
          rp_cpu_kernel_name());
}

/* Checks finished outputs (described by `out`, host memory) against inputs described by `in`
 * (the same call, except the original q and k for an in-place call) with the float64 formula. */
static inline void verify_outputs(const rp_rope_pool_args *in, const rp_rope_pool_args *out, const char *what)
{
    rp_problem p;
    rp_err err = {NULL, 0};
    CHECK(rp_validate(out, &p, &err) == RP_OK, "%s: outputs do not validate", what);
    p.q = in->q.data;
    p.k = in->k.data;
    p.v = in->v.data;
    for (int d = 0; d < 3; d++) {
        p.q_stride[d] = in->q.strides[d];
        p.k_stride[d] = in->k.strides[d];
        p.v_stride[d] = in->v.strides[d];
    }
    double *freq = test_alloc((size_t)(out->head_dim / 2 + 1) * sizeof *freq);
    rp_compute_inv_freq(out->rope_base, out->head_dim, freq);
    p.inv_freq = freq;
    rp_verify_result r;
    rp_ref_verify(&p, &r);
    CHECK(r.failures == 0, "%s: %lld of %lld wrong; first: %s", what, (long long)r.failures,
          (long long)r.checked, r.first_failure);
    CHECK(r.checked > 0 || out->q.shape[0] == 0, "%s: nothing was checked", what);
    free(freq);
}

/* Position t of a sweep that stresses the range reduction: 0, tiny, 2^24 (where float32 stops
 * counting), the int32 extremes, values near multiples of pi/2 for the first frequency; then
 * random int32 values from rng. */
static inline int64_t extreme_position(test_rng *rng, int64_t t)
{
    static const int64_t fixed[] = {0, 1, -1, 2, 3, 7, 1 << 24, (1 << 24) + 1, 2147483647,
                                    -2147483647 - 1, 2147483646, 1000000, 1686629713, 710, 355,
                                    104348, 1073741824, -1073741823};
    if (t < (int64_t)(sizeof fixed / sizeof fixed[0]))
        return fixed[t];
    return (int64_t)(int32_t)(uint32_t)rng_next(rng);
}

/* The extreme-position case both suites run: 61 tokens of shape dims = {Hq, Hk, D}, a pool of 64
 * slots (some tokens skip it), positions from extreme_position. */
static inline void fixture_init_extreme(fixture *f, test_rng *rng, const int64_t dims[3], rp_dtype dtype,
                                        rp_dtype index_dtype)
{
    const int64_t T = 61;
    fixture_init(f, rng, T, dims[0], dims[1], dims[2], 64, dtype, index_dtype, 1000, 1);
    for (int64_t t = 0; t < T; t++)
        test_store(f->positions, index_dtype, t, (double)extreme_position(rng, t));
}

#endif /* RP_TEST_VERIFY_H */
