/*
 * rope_pool_mlx.cpp — the RopePoolFused primitive.
 *
 * At the call: describe the seven arrays by shape and dtype only (nothing is evaluated) and let the
 * library check them with RP_VALIDATE_ONLY, so a bad call fails where it is made with the
 * library's message, the seed's first. At evaluation (eval_cpu): allocate q_rot and k_rot, make
 * k_pool_new and v_pool_new views of the input pools' own buffers (copy_shared_buffer: no pool
 * copy, ever, as the seed's Metal kernel), and run rp_rope_pool_fused on the arrays' data and
 * strides; the library checks slot values before it writes anything.
 */
#include "rope_pool_mlx.h"
#include "../python_words.h"

#include <array>
#include <atomic>
#include <cstring>
#include <sstream>

#include "mlx/stream.h"
#include "mlx/utils.h"

namespace ropepool_mlx {

namespace {

enum { MESSAGE_SIZE = 512 };

std::atomic<rp_context *> cpu_context{nullptr};

rp_dtype rp_dtype_of(mx::Dtype d)
{
    switch (d.val()) {
    case mx::Dtype::Val::float32: return RP_F32;
    case mx::Dtype::Val::float16: return RP_F16;
    case mx::Dtype::Val::bfloat16: return RP_BF16;
    case mx::Dtype::Val::int32: return RP_I32;
    case mx::Dtype::Val::int64: return RP_I64;
    case mx::Dtype::Val::float64: return RP_F64;
    case mx::Dtype::Val::int8: return RP_I8;
    case mx::Dtype::Val::uint8: return RP_U8;
    case mx::Dtype::Val::int16: return RP_I16;
    case mx::Dtype::Val::uint16: return RP_U16;
    case mx::Dtype::Val::uint32: return RP_U32;
    case mx::Dtype::Val::uint64: return RP_U64;
    case mx::Dtype::Val::bool_: return RP_BOOL;
    default: return RP_DTYPE_OTHER;
    }
}

/* An array as an rp_tensor: shape and dtype always; data and strides (MLX's, in elements) only
 * with memory, i.e. at evaluation. Without memory the strides are row-major, which the
 * validate-only checks do not look at. */
rp_tensor describe(const mx::array &a, bool memory)
{
    rp_tensor t = RP_ZERO_INIT;
    t.ndim = static_cast<int32_t>(a.ndim());
    t.dtype = rp_dtype_of(a.dtype());
    const int n = t.ndim < RP_MAX_DIMS ? t.ndim : RP_MAX_DIMS;
    int64_t stride = 1;
    for (int d = n - 1; d >= 0; d--) {
        t.shape[d] = a.shape(d);
        t.strides[d] = memory ? static_cast<int64_t>(a.strides()[d]) : stride;
        stride *= t.shape[d];
    }
    if (memory)
        t.data = const_cast<void *>(static_cast<const void *>(a.data<char>()));
    return t;
}

/* tensors: q, k, v, positions, slots, k_pool, v_pool, q_rot, k_rot. */
rp_rope_pool_args make_args(const Params &p, const std::array<const mx::array *, 9> &tensors, bool memory)
{
    rp_rope_pool_args a = p.fields;
    rp_tensor *fields[9] = {&a.q, &a.k, &a.v, &a.positions, &a.slots, &a.k_pool, &a.v_pool, &a.q_rot, &a.k_rot};
    for (int i = 0; i < 9; i++)
        *fields[i] = describe(*tensors[i], memory);
    a.inv_freq = p.inv_freq.empty() ? nullptr : p.inv_freq.data();
    a.flags = memory ? 0u : RP_VALIDATE_ONLY;
    return a;
}

const char *const ARRAY_NAMES[7] = {"q", "k", "v", "positions", "slots", "k_pool", "v_pool"};

/* The library can only print the number of a dtype it has no rp_dtype for (MLX's complex64):
 * name the argument and its dtype instead, in the NumPy call's words and at its point (before the
 * seed's checks). */
void refuse_unknown_dtypes(const std::array<const mx::array *, 7> &arrays)
{
    for (int i = 0; i < 7; i++)
        if (rp_dtype_of(arrays[i]->dtype()) == RP_DTYPE_OTHER) {
            std::ostringstream text;
            text << ARRAY_NAMES[i] << " has dtype " << arrays[i]->dtype() << RPY_DTYPE_NOT_TAKEN;
            throw Error(RP_ERR_INVALID_ARGUMENT, text.str().c_str());
        }
}

/* The array whose buffer `a` will share when evaluated, if `a` is a view that never copies (or a
 * pool returned by an earlier call, which is its input pool's buffer); NULL if it makes a new one.
 * Reshape and Contiguous are not views here: either may copy. */
const mx::array *shared_source(const mx::array &a)
{
    const mx::Primitive &p = a.primitive();
    if (dynamic_cast<const RopePoolFused *>(&p) != nullptr) {
        const auto outputs = a.outputs();
        for (size_t i = 2; i < 4 && i < outputs.size(); i++)
            if (outputs[i].id() == a.id())
                return &a.inputs()[i + 3]; /* k_pool_new -> k_pool, v_pool_new -> v_pool */
        return nullptr;
    }
    /* By name: MLX does not export its primitives' type information. */
    static const char *const views[] = {"Slice", "Split", "AsStrided", "Transpose", "Squeeze", "ExpandDims", "Copy"};
    for (const char *view : views)
        if (std::strcmp(p.name(), view) == 0)
            return &a.inputs()[0];
    return nullptr;
}

/* Under mx.compile the call's write into a pool's buffer is only safe when that buffer comes from
 * outside the trace: compile merges equal computations, so a pool computed inside (mx.zeros(shape))
 * would be one array with another mx.zeros(shape) of the function, which would then hold the call's
 * rows; and a captured unevaluated pool is computed afresh at each call, so the rows of earlier
 * calls are lost. So each pool must lead, through views, to an argument of the traced function or
 * an evaluated array. MLX does not say which transform traces, so mx.vmap and mx.grad (which have
 * no rule for the call anyway) are held to the same. */
void refuse_pools_made_in_a_trace(const mx::array &k_pool, const mx::array &v_pool)
{
    /* Whether a trace is running: MLX exports no function that says so, but a tracer array reads
     * as one only then (array::is_tracer). */
    mx::array probe(0);
    probe.set_tracer(true);
    if (!probe.is_tracer())
        return;
    const mx::array *pools[2] = {&k_pool, &v_pool};
    for (int i = 0; i < 2; i++) {
        const mx::array *a = pools[i];
        while (a != nullptr && a->has_primitive()) {
            const mx::array *source = shared_source(*a);
            if (source == nullptr) {
                std::ostringstream text;
                text << ARRAY_NAMES[5 + i] << " is computed in a traced function (mx.compile, mx.vmap, mx.grad), "
                     << "made inside it or captured unevaluated, by an MLX operation that makes a new array ("
                     << a->primitive().name() << "): the call writes into the pool's buffer, which mx.compile "
                     << "may share with an equal computation of the function or make afresh at each call. Pass "
                     << "the pool in as an argument of the function (or a slice or transpose of one: "
                     << "cache[i, ...], not cache[i], which MLX gathers into a copy), or capture an evaluated array";
                throw Error(RP_ERR_INVALID_ARGUMENT, text.str().c_str());
            }
            a = source;
        }
    }
}

void run(rp_context *ctx, const rp_rope_pool_args &args)
{
    char message[MESSAGE_SIZE];
    const rp_status st = rp_rope_pool_fused(ctx, &args, message, sizeof message);
    if (st != RP_OK && std::strncmp(message, RPY_UINT8_POOLS_C, sizeof RPY_UINT8_POOLS_C - 1) == 0)
        throw Error(st, RPY_UINT8_POOLS_PYTHON); /* the keyword a Python caller sets, not the C field */
    if (st != RP_OK)
        throw Error(st, message);
}

} // namespace

void set_cpu_context(rp_context *ctx)
{
    cpu_context.store(ctx);
}

std::vector<mx::array> rope_pool_fused(const mx::array &q, const mx::array &k, const mx::array &v,
                                       const mx::array &positions, const mx::array &slots,
                                       const mx::array &k_pool, const mx::array &v_pool,
                                       Params params, mx::StreamOrDevice s)
{
    refuse_unknown_dtypes({&q, &k, &v, &positions, &slots, &k_pool, &v_pool});
    /* q_rot and k_rot are described by q and k themselves: same shape and dtype. */
    run(nullptr, make_args(params, {&q, &k, &v, &positions, &slots, &k_pool, &v_pool, &q, &k}, false));
    refuse_pools_made_in_a_trace(k_pool, v_pool);
    /* The kernel is ropepool's CPU backend: a GPU stream or device (the default on Apple silicon)
     * gets the CPU stream instead. MLX orders it after the GPU work that produces the inputs
     * (unified memory: no copies), at the price of that synchronisation. A GPU device is replaced
     * before MLX resolves it: without a GPU, resolving it throws, though nothing runs there. */
    if (const auto *device = std::get_if<mx::Device>(&s); device != nullptr && device->type != mx::Device::cpu)
        s = mx::Device(mx::Device::cpu);
    mx::Stream stream = mx::to_stream(s);
    if (stream.device != mx::Device::cpu)
        stream = mx::default_stream(mx::Device::cpu);
    return mx::array::make_arrays({q.shape(), k.shape(), k_pool.shape(), v_pool.shape()},
                                  {q.dtype(), k.dtype(), k_pool.dtype(), v_pool.dtype()},
                                  std::make_shared<RopePoolFused>(stream, std::move(params)),
                                  {q, k, v, positions, slots, k_pool, v_pool});
}

void RopePoolFused::eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs)
{
    auto &q_rot = outputs[0], &k_rot = outputs[1];
    q_rot.set_data(mx::allocator::malloc(q_rot.nbytes()));
    k_rot.set_data(mx::allocator::malloc(k_rot.nbytes()));
    /* The new pools are the old pools' buffers, strides and offset: the call writes rows of them. */
    outputs[2].copy_shared_buffer(inputs[5]);
    outputs[3].copy_shared_buffer(inputs[6]);

    /* The call runs here, on the thread that evaluates the graph, not as a task on the stream: MLX
     * turns an exception thrown by a stream task into a RuntimeError carrying only its text, while
     * one thrown here reaches mx.eval as itself (RopePoolError, a ValueError, with the library's
     * message and nothing written). So wait for the stream first, always: inputs computed in this
     * evaluation may still be queued on it, and so may readers of the pools queued before the call
     * (mx.async_eval of attention over the old cache), which the write must not overtake. */
    mx::synchronize(stream());
    run(cpu_context.load(), make_args(params_, {&inputs[0], &inputs[1], &inputs[2], &inputs[3], &inputs[4],
                                                &outputs[2], &outputs[3], &q_rot, &k_rot}, true));
}

void RopePoolFused::eval_gpu(const std::vector<mx::array> &, std::vector<mx::array> &)
{
    /* rope_pool_fused never makes a GPU-stream primitive (see above). */
    throw std::runtime_error("[RopePoolFused] has no GPU kernel: it runs on the CPU stream");
}

std::vector<mx::Shape> RopePoolFused::output_shapes(const std::vector<mx::array> &inputs)
{
    return {inputs[0].shape(), inputs[1].shape(), inputs[5].shape(), inputs[6].shape()};
}

bool RopePoolFused::is_equivalent(const mx::Primitive &other) const
{
    /* rp_rope_pool_args has no padding (its 4-byte fields come in pairs, reserved0 included), so
     * equal fields are equal bytes. */
    const Params &o = static_cast<const RopePoolFused &>(other).params_;
    return std::memcmp(&params_.fields, &o.fields, sizeof o.fields) == 0 && params_.inv_freq == o.inv_freq;
}

} // namespace ropepool_mlx
