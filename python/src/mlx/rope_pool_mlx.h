/*
 * rope_pool_mlx.h — ropepool's call as an MLX operation: a Primitive whose CPU evaluation runs
 * libropepool, so that its four results are lazy mx.arrays like any other.
 */
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/mlx.h"
#include "mlx/primitives.h"
#include "ropepool.h"

namespace ropepool_mlx {

namespace mx = mlx::core;

/* A call the library refused: at the call (shapes, dtypes, keywords) or when the results are
 * evaluated (slot values). The binding maps it to ropepool.RopePoolError, a ValueError. */
struct Error : std::invalid_argument {
    Error(rp_status s, const char *message) : std::invalid_argument(message), status(s) {}
    rp_status status;
};

/* The call's scalar arguments: rp_rope_pool_args' fields, minus the tensors. */
struct Params {
    int64_t head_dim = 0, num_qo_heads = 0, num_kv_heads = 0;
    double rope_base = 0.0;
    int32_t style = RP_ROPE_NEOX;
    int64_t rotary_dim = 0;         /* 0 = head_dim */
    std::vector<double> inv_freq;   /* empty = rope_base's frequencies */
    double attention_scaling = 0.0; /* 0 = 1.0 */
    int64_t v_head_dim = 0;         /* 0 = head_dim */
    int32_t pool_dtype = 0;         /* fp8 pools stored as uint8: RP_F8_E4M3 | RP_F8_E5M2 */
    double k_scale = 0.0, v_scale = 0.0;
    int32_t num_threads = 0;        /* 0 = the context's */
};

/* (q_rot, k_rot, k_pool_new, v_pool_new), lazy. Refuses a bad call here, with the library's
 * message; slot values are checked when the results are evaluated. The new pools share the
 * buffers of k_pool and v_pool (no copy): rows slots[t] are written into those buffers. */
std::vector<mx::array> rope_pool_fused(const mx::array &q, const mx::array &k, const mx::array &v,
                                       const mx::array &positions, const mx::array &slots,
                                       const mx::array &k_pool, const mx::array &v_pool,
                                       Params params, mx::StreamOrDevice s = {});

/* The CPU context the evaluations run on (worker threads, frequency cache); set once by the module
 * before the first call. NULL runs each call on the stream's thread alone. */
void set_cpu_context(rp_context *ctx);

class RopePoolFused : public mx::Primitive {
  public:
    RopePoolFused(mx::Stream stream, Params params) : mx::Primitive(stream), params_(std::move(params)) {}

    void eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override;
    void eval_gpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) override;
    std::vector<mx::Shape> output_shapes(const std::vector<mx::array> &inputs) override;
    bool is_equivalent(const mx::Primitive &other) const override;
    const char *name() const override { return "RopePoolFused"; }

  private:
    Params params_;
};

} // namespace ropepool_mlx
