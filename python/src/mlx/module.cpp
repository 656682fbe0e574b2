/*
 * module.cpp — ropepool._ropepool_mlx, the nanobind module behind ropepool.mlx (python/ropepool/
 * mlx.py parses the keywords and calls fused()). It shares nanobind's type registry with mlx.core,
 * so mx.array crosses in both directions as the same C++ object, and it is built against the exact
 * MLX that runs it: mlx_version says which.
 */
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "rope_pool_mlx.h"

namespace nb = nanobind;
namespace rpm = ropepool_mlx;
namespace mx = mlx::core;

namespace {

mx::StreamOrDevice stream_or_device(nb::handle obj)
{
    if (obj.is_none())
        return {};
    mx::Stream s{0, mx::Device::cpu};
    if (nb::try_cast(obj, s))
        return s;
    mx::Device d = mx::Device::cpu;
    if (nb::try_cast(obj, d))
        return d;
    throw nb::type_error("stream must be an mlx.core.Stream, an mlx.core.Device or None");
}

} // namespace

NB_MODULE(_ropepool_mlx, m)
{
    nb::module_::import_("mlx.core");
    /* Refusals, at the call and when MLX rethrows one from the evaluating task, are ropepool's own
     * exception (a ValueError). nanobind's translators are process-wide, so mlx.core.eval's
     * wrapper uses this one too. */
    static nb::object error = nb::module_::import_("ropepool._ropepool").attr("RopePoolError");
    nb::register_exception_translator([](const std::exception_ptr &p, void *) {
        try {
            std::rethrow_exception(p);
        } catch (const rpm::Error &e) {
            nb::object exc = error(e.what());
            exc.attr("status") = rp_status_name(e.status);
            PyErr_SetObject(error.ptr(), exc.ptr());
        }
    });

    m.attr("mlx_version") = std::to_string(MLX_VERSION_MAJOR) + "." + std::to_string(MLX_VERSION_MINOR) + "." +
                            std::to_string(MLX_VERSION_PATCH);

    m.def("set_threads", [](int32_t num_threads) {
        rp_context_options opts = RP_ZERO_INIT;
        opts.num_threads = num_threads;
        rp_context *ctx = nullptr;
        char message[512];
        const rp_status st = rp_context_create(&opts, &ctx, message, sizeof message);
        if (st != RP_OK)
            throw rpm::Error(st, message);
        rpm::set_cpu_context(ctx); /* kept for the life of the process, like _ropepool's */
    }, nb::arg("num_threads"), "Create the CPU context the evaluations use (once, before the first call).");

    m.def("fused",
          [](const mx::array &q, const mx::array &k, const mx::array &v, const mx::array &positions,
             const mx::array &slots, const mx::array &k_pool, const mx::array &v_pool, int64_t head_dim,
             int64_t num_qo_heads, int64_t num_kv_heads, double rope_base, int32_t style, int64_t rotary_dim,
             std::vector<double> inv_freq, double attention_scaling, int64_t v_head_dim, int32_t pool_dtype,
             double k_scale, double v_scale, std::vector<int32_t> mrope_section, uint32_t mrope_interleaved,
             double norm_eps, double norm_weight_offset, int32_t num_threads, nb::handle stream) {
              rpm::Params p;
              rp_rope_pool_args &a = p.fields;
              a.head_dim = head_dim;
              a.num_qo_heads = num_qo_heads;
              a.num_kv_heads = num_kv_heads;
              a.rope_base = rope_base;
              a.style = style;
              a.rotary_dim = rotary_dim;
              a.attention_scaling = attention_scaling;
              a.v_head_dim = v_head_dim;
              a.pool_dtype = pool_dtype;
              a.k_scale = k_scale;
              a.v_scale = v_scale;
              a.num_threads = num_threads;
              /* no weights on MLX: given alone, the library refuses them naming the missing weight */
              a.norm_eps = norm_eps;
              a.norm_weight_offset = norm_weight_offset;
              for (size_t i = 0; i < 3 && i < mrope_section.size(); i++) /* ropepool.mlx passes 3 */
                  a.mrope_section[i] = mrope_section[i];
              a.mrope_interleaved = mrope_interleaved;
              p.inv_freq = std::move(inv_freq);
              auto out = rpm::rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, std::move(p),
                                              stream_or_device(stream));
              return nb::make_tuple(out[0], out[1], out[2], out[3]);
          },
          nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("positions"), nb::arg("slots"), nb::arg("k_pool"),
          nb::arg("v_pool"), nb::arg("head_dim"), nb::arg("num_qo_heads"), nb::arg("num_kv_heads"),
          nb::arg("rope_base"), nb::arg("style"), nb::arg("rotary_dim"), nb::arg("inv_freq"),
          nb::arg("attention_scaling"), nb::arg("v_head_dim"), nb::arg("pool_dtype"), nb::arg("k_scale"),
          nb::arg("v_scale"), nb::arg("mrope_section"), nb::arg("mrope_interleaved"), nb::arg("norm_eps"),
          nb::arg("norm_weight_offset"), nb::arg("num_threads"),
          nb::arg("stream").none(),
          "The seven arrays, then rp_rope_pool_args' scalar fields (0 = default), then the stream. "
          "Use ropepool.mlx.rope_pool_fused.");
}
