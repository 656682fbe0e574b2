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

/* The call's scalar arguments: rp_rope_pool_args with its scalar fields set (tensors, inv_freq and
 * flags unset: each evaluation fills them), and the frequency table the primitive owns. */
struct Params {
    rp_rope_pool_args fields = RP_ZERO_INIT;
    std::vector<double> inv_freq; /* empty = rope_base's frequencies */
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
