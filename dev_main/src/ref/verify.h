/*
 * verify.h — the contract's accuracy check, shared by the tests and the benchmark.
 */
#ifndef RP_VERIFY_H
#define RP_VERIFY_H

#include "../internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rp_verify_result {
    int64_t checked;         /* output elements compared */
    int64_t failures;        /* elements outside the bound, or pool rows not copied exactly */
    double worst_ratio;      /* max |out - float64| / bound over elements not exactly rounded */
    char first_failure[256]; /* the first failure, readable */
} rp_verify_result;

/* p describes a finished call: its inputs (q, k, v, positions, slots; for an in-place call, a
 * copy of the original q and k), its outputs (q_rot, k_rot, and the pool rows named by slots)
 * and its frequency table (p->inv_freq: rp_problem_fill_freq gives rope_base's). Host memory only. */
void rp_ref_verify(const rp_problem *p, rp_verify_result *r);

/* The same for the outputs of `parts`: with RP_PARTS_SCATTER after RP_PARTS_ROTATE (the unfused
 * baseline), an fp8 k_pool holds fp8(k_rot / k_scale), the rounded k_rot quantised again, and is
 * checked as such; everything else as rp_ref_verify. */
void rp_ref_verify_parts(const rp_problem *p, rp_parts parts, rp_verify_result *r);

#ifdef __cplusplus
}
#endif

#endif /* RP_VERIFY_H */
