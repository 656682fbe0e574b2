/*
 * test_fuzz.c — random calls against one shared arena of memory.
 *
 * Every tensor of a call is a random view (shape, strides, sign, padding, offset, sometimes
 * aliasing another) into one arena, and the RoPE variant (style, rotary_dim, inv_freq,
 * attention_scaling) is drawn too. Whatever the library answers, three things must hold:
 *   - an error leaves the arena byte-identical (nothing written on failure);
 *   - a success changes no byte outside q_rot, k_rot and the pool rows named by the slots;
 *   - a success's outputs meet the float64 bound against the inputs as they were before the call.
 * Under `make asan` this also proves no out-of-bounds access. Seed: argv[1] or a fixed default.
 */
#include "test_verify.h"

#include "overlap.h"

enum { ARENA = 1 << 18, CALLS = 3000, QUICK_CALLS = 1000 }; /* QUICK: ROPEPOOL_TEST_QUICK */

static test_rng rng;
static unsigned char arena[ARENA], before[ARENA], writable[ARENA];

static int64_t pick(int64_t lo, int64_t hi) /* uniform in [lo, hi] */
{
    return lo + (int64_t)(rng_next(&rng) % (uint64_t)(hi - lo + 1));
}

static int chance(int percent)
{
    return pick(0, 99) < percent;
}

/* A random strided view of `shape` placed somewhere in the arena: row-major, padded, permuted,
 * reversed, or with a non-unit inner stride. */
static rp_tensor random_view(int ndim, const int64_t *shape, rp_dtype dtype)
{
    rp_tensor t = {0};
    t.ndim = ndim;
    t.dtype = dtype;
    for (int i = 0; i < ndim; i++)
        t.shape[i] = shape[i];
    int order[4] = {0, 1, 2, 3};
    if (ndim == 3 && chance(15)) { /* swap the two outer axes in memory */
        order[0] = 1;
        order[1] = 0;
    }
    int64_t stride = chance(10) ? 2 : 1;
    for (int j = ndim - 1; j >= 0; j--) {
        const int d = order[j];
        t.strides[d] = stride;
        stride *= shape[d] + (chance(20) ? pick(1, 3) : 0);
    }
    if (ndim == 3 && chance(10))
        t.strides[0] = -t.strides[0];
    size_t elem = rp_dtype_size(dtype) ? rp_dtype_size(dtype) : 1;
    rp_extent e;
    t.data = arena; /* placeholder to measure the extent relative to the arena's start */
    int64_t lo = 0, hi = 0;
    if (!rp_tensor_is_empty(&t) && rp_tensor_extent(&t, &e)) {
        lo = (int64_t)((uintptr_t)arena - e.begin);
        hi = (int64_t)(e.end - (uintptr_t)arena);
    }
    int64_t room = ARENA - lo - hi;
    int64_t offset = room > 0 ? lo + pick(0, room / (int64_t)elem) * (int64_t)elem : 0;
    if (chance(2))
        offset += 1; /* misaligned */
    t.data = arena + offset;
    return t;
}

/* Marks the bytes of element (t, h, i) of a [., ., D] tensor as writable. */
static void mark_row(const rp_tensor *t, int64_t a, int64_t b, int64_t D)
{
    const size_t elem = rp_dtype_size((rp_dtype)t->dtype);
    for (int64_t i = 0; i < D; i++) {
        const int64_t off = (a * t->strides[0] + b * t->strides[1] + i * t->strides[2]) * (int64_t)elem;
        const int64_t pos = (int64_t)((unsigned char *)t->data - arena) + off;
        if (pos >= 0 && pos + (int64_t)elem <= ARENA)
            memset(writable + pos, 1, elem);
    }
}

/* Marks the bytes of pool row `slot`, head h, dims [0, n) of a pool in layout kv_layout. */
static void mark_pool_row(const rp_tensor *t, int32_t kv_layout, int64_t slot, int64_t h, int64_t n)
{
    const size_t elem = rp_dtype_size((rp_dtype)t->dtype);
    for (int64_t i = 0; i < n; i++) {
        const int64_t pos = (int64_t)((unsigned char *)test_pool_element(t, kv_layout, slot, h, i) - arena);
        if (pos >= 0 && pos + (int64_t)elem <= ARENA)
            memset(writable + pos, 1, elem);
    }
}

static int64_t load_index(const rp_tensor *t, int64_t i)
{
    return rp_load_index(t->data, (rp_dtype)t->dtype, t->strides[0], i);
}

static int status_counts[8];

static void fuzz_one(int call, int *ok_calls)
{
    const rp_dtype dtypes[] = {RP_F32, RP_F16, RP_BF16};
    const rp_dtype dt = chance(3) ? RP_F64 : dtypes[pick(0, 2)];
    const int64_t T = pick(0, 12), Hq = pick(1, 5), Hk = pick(1, 3), D = 2 * pick(1, 24);
    /* How the pools are laid out and stored: mostly flat pools of q's dtype; paged ones (any
     * block size), a wider or narrower v (v_head_dim), fp8 pools (typed or uint8) with scales;
     * sometimes an unknown layout, a wrong rank, a missing or mismatched format, a bad scale. */
    const int32_t layout = chance(60) ? RP_KV_FLAT : chance(3) ? (int32_t)pick(3, 4) : (int32_t)pick(1, 2);
    const int64_t bs = pick(1, 5), blocks = pick(0, 6);
    const int paged = layout == RP_KV_NHD || layout == RP_KV_HND, four_d = paged != chance(3);
    const int64_t P = paged ? blocks * bs : pick(0, 24), Dv = chance(25) ? pick(1, 40) : D;
    rp_rope_pool_args a = {0};
    const int64_t qs[3] = {T, Hq, D}, ks[3] = {T, Hk, D}, vs[3] = {T, Hk, Dv}, ts[1] = {T};
    int64_t kps[4] = {P, Hk, D}, vps[4] = {P, Hk, Dv};
    if (four_d) {
        const int64_t nhd[4] = {blocks, bs, Hk, D}, hnd[4] = {blocks, Hk, bs, D};
        for (int d = 0; d < 4; d++)
            kps[d] = vps[d] = layout == RP_KV_HND ? hnd[d] : nhd[d];
        vps[3] = Dv;
    }
    static const rp_dtype fp8s[2] = {RP_F8_E4M3, RP_F8_E5M2};
    const rp_dtype fmt = fp8s[pick(0, 1)];
    const rp_dtype pool_dt = chance(60) ? dt : chance(50) ? fmt : RP_U8;
    a.q = random_view(3, qs, dt);
    a.k = random_view(3, ks, dt);
    a.v = random_view(3, vs, dt);
    a.q_rot = chance(20) ? a.q : random_view(3, qs, dt);
    a.k_rot = chance(20) ? a.k : random_view(3, ks, dt);
    a.k_pool = random_view(four_d ? 4 : 3, kps, pool_dt);
    a.v_pool = random_view(four_d ? 4 : 3, vps, chance(3) ? fp8s[pick(0, 1)] : pool_dt);
    a.kv_layout = layout;
    a.v_head_dim = Dv != D ? (chance(5) ? Dv + 1 : Dv) : chance(10) ? D : 0;
    a.pool_dtype = pool_dt == RP_U8 ? (chance(90) ? fmt : 0) : chance(3) ? fmt : 0;
    static float scale_cells[2];
    if (pool_dt != dt || chance(3)) {
        a.k_scale = chance(40) ? 0.0 : chance(5) ? -1.0 : rng_uniform(&rng, 0.05, 4.0);
        a.v_scale = chance(40) ? 0.0 : chance(5) ? NAN : rng_uniform(&rng, 0.05, 4.0);
        for (int i = 0; i < 2; i++)
            scale_cells[i] = chance(5) ? 0.0f : (float)rng_uniform(&rng, 0.05, 4.0);
        if (chance(20))
            a.k_scale_ptr = &scale_cells[0];
        if (chance(20))
            a.v_scale_ptr = &scale_cells[1];
    }
    /* mRoPE now and then: positions [3, T] (sometimes [2, T] or 1-D), a section mostly summing
     * to rotary_dim / 2 (set below), either rule, sometimes the rule alone. */
    const int mrope = chance(25);
    const int64_t mps[2] = {chance(5) ? 2 : 3, T};
    a.positions = mrope && !chance(5) ? random_view(2, mps, chance(50) ? RP_I32 : RP_I64)
                                      : random_view(1, ts, chance(50) ? RP_I32 : RP_I64);
    a.slots = random_view(1, ts, chance(2) ? RP_F32 : chance(50) ? RP_I32 : RP_I64);
    a.head_dim = chance(3) ? D + 1 : D;
    a.num_qo_heads = Hq;
    a.num_kv_heads = chance(3) ? Hk + 1 : Hk;
    a.rope_base = chance(2) ? -1.0 : chance(50) ? 10000.0 : 500000.0;
    if (chance(5)) /* a wrong rank */
        a.v.ndim = 2;
    /* The RoPE variant: mostly valid, sometimes an unknown style, a bad rotary_dim, a table with
     * a bad entry, or a bad attention scaling. */
    static double table[32];
    a.style = chance(3) ? (int32_t)pick(2, 5) : chance(50) ? RP_ROPE_GPTJ : RP_ROPE_NEOX;
    a.rotary_dim = chance(40) ? 0 : chance(5) ? pick(-3, D + 3) : 2 * pick(1, D / 2);
    if (chance(40)) {
        for (int j = 0; j < 32; j++)
            table[j] = chance(10) ? 0.0 : rng_uniform(&rng, 0.0, 1.5);
        if (chance(5))
            table[pick(0, D / 2 - 1)] = chance(50) ? -0.5 : NAN;
        a.inv_freq = table;
    }
    a.attention_scaling = chance(50) ? 0.0 : chance(3) ? -1.0 : rng_uniform(&rng, 0.5, 2.0);
    if (mrope) {
        const int64_t half = (a.rotary_dim > 0 ? a.rotary_dim : D) / 2, t_len = pick(0, half), h_len = pick(0, half - t_len);
        a.mrope_section[0] = (int32_t)t_len;
        a.mrope_section[1] = (int32_t)h_len;
        a.mrope_section[2] = (int32_t)(half - t_len - h_len + (chance(5) ? pick(-1, 1) : 0));
        if (chance(3))
            a.mrope_section[pick(0, 2)] = -1;
        a.mrope_interleaved = chance(50) ? 1u : chance(3) ? 2u : 0u;
    } else if (chance(2)) {
        a.mrope_interleaved = 1; /* without a section */
    }
    /* QK-norm: mostly none; weights of q's dtype or float32 (sometimes an integer dtype, a
     * misaligned pointer, or one into the arena, where outputs may lie), eps and offset mostly
     * valid, sometimes an eps without a weight. */
    static float weights[2][64];
    if (chance(30)) {
        const rp_dtype wdt = chance(50) ? RP_F32 : chance(5) ? RP_I32 : dt == RP_F64 ? RP_F32 : dt;
        for (int w = 0; w < 2; w++)
            for (int64_t i = 0; i < D; i++)
                test_store(weights[w], wdt == RP_I32 ? RP_F32 : wdt, i, rng_uniform(&rng, -1.0, 2.0));
        a.q_norm_weight = chance(30) ? NULL : chance(5) ? (const char *)weights[0] + 1 : (const void *)weights[0];
        a.k_norm_weight = chance(30) ? NULL : chance(5) ? (const void *)(arena + pick(0, ARENA - 256)) : weights[1];
        a.q_norm_weight_dtype = a.q_norm_weight && wdt == dt && chance(50) ? 0 : wdt;
        a.k_norm_weight_dtype = wdt;
        a.norm_eps = chance(5) ? 0.0 : chance(5) ? NAN : 1e-6;
        a.norm_weight_offset = chance(50) ? 0.0 : chance(5) ? INFINITY : 1.0;
    }

    /* Index values go into the arena before the snapshot (they are inputs). Slots: mostly
     * distinct in range, some negative, sometimes out of range or repeated. */
    const int align_ok = a.positions.dtype == RP_I32 || a.positions.dtype == RP_I64;
    for (int64_t t = 0; t < T && align_ok; t++) {
        int64_t *p64 = NULL;
        int32_t *p32 = NULL;
        const size_t pe = rp_dtype_size((rp_dtype)a.positions.dtype), se = rp_dtype_size((rp_dtype)a.slots.dtype);
        const int rows = a.positions.ndim == 2 ? (int)a.positions.shape[0] : 1;
        for (int r = 0; r < rows && (uintptr_t)a.positions.data % pe == 0; r++) {
            const int64_t pos = chance(10) ? (int64_t)(int32_t)(uint32_t)rng_next(&rng) : pick(0, 100000);
            const int64_t at = rows > 1 ? r * a.positions.strides[0] + t * a.positions.strides[1] : t * a.positions.strides[0];
            if (a.positions.dtype == RP_I64) {
                p64 = (int64_t *)a.positions.data + at;
                *p64 = pos;
            } else {
                p32 = (int32_t *)a.positions.data + at;
                *p32 = (int32_t)pos;
            }
        }
        if ((uintptr_t)a.slots.data % se == 0 && a.slots.dtype != RP_F32) {
            int64_t slot = P > 0 ? (t * 5 + call) % P : -1;
            if (chance(20)) slot = -pick(1, 5);
            if (chance(3)) slot = P + pick(0, 3);
            if (chance(3) && t > 0) slot = load_index(&a.slots, t - 1);
            if (a.slots.dtype == RP_I64)
                ((int64_t *)a.slots.data)[t * a.slots.strides[0]] = slot;
            else
                ((int32_t *)a.slots.data)[t * a.slots.strides[0]] = (int32_t)slot;
        }
    }

    memcpy(before, arena, ARENA);
    char msg[512];
    const rp_status st = rp_rope_pool_fused(NULL, &a, msg, sizeof msg);
    status_counts[(unsigned)st < 8 ? st : 0]++;
    if (st != RP_OK) {
        CHECK(msg[0] != '\0', "call %d: error %s without a message", call, rp_status_name(st));
        CHECK(memcmp(before, arena, ARENA) == 0, "call %d: failed call (%s) wrote memory", call, msg);
        return;
    }
    ++*ok_calls;

    /* Success: only outputs may change ... */
    memset(writable, 0, ARENA);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t h = 0; h < Hq; h++)
            mark_row(&a.q_rot, t, h, D);
        for (int64_t h = 0; h < Hk; h++)
            mark_row(&a.k_rot, t, h, D);
        const int64_t slot = rp_load_index((const unsigned char *)a.slots.data - arena + before,
                                           (rp_dtype)a.slots.dtype, a.slots.strides[0], t);
        for (int64_t h = 0; slot >= 0 && h < Hk; h++) {
            mark_pool_row(&a.k_pool, a.kv_layout, slot, h, D);
            mark_pool_row(&a.v_pool, a.kv_layout, slot, h, Dv);
        }
    }
    for (int64_t i = 0; i < ARENA; i++)
        if (!writable[i] && arena[i] != before[i]) {
            CHECK(0, "call %d: byte %lld outside the outputs changed", call, (long long)i);
            break;
        }

    /* ... and they meet the bound against the inputs as they were. */
    rp_problem p;
    rp_err err = {NULL, 0};
    CHECK(rp_validate(&a, &p, &err) == RP_OK && rp_resolve_host_scales(&p, &err) == RP_OK,
          "call %d: success but args do not validate", call);
    const ptrdiff_t shift = before - arena;
    p.q = (const char *)p.q + shift;
    p.k = (const char *)p.k + shift;
    p.v = (const char *)p.v + shift;
    p.positions = (const char *)p.positions + shift;
    p.slots = (const char *)p.slots + shift;
    double freq[64];
    rp_problem_fill_freq(&p, freq);
    rp_verify_result r;
    rp_ref_verify(&p, &r);
    CHECK(r.failures == 0, "call %d: %lld elements wrong; first: %s", call, (long long)r.failures, r.first_failure);
}

int main(int argc, char **argv)
{
    check_forced_level();
    rng.state = argc > 1 ? strtoull(argv[1], NULL, 0) : 0x5eed;
    for (size_t i = 0; i < ARENA; i++)
        arena[i] = (unsigned char)rng_next(&rng);
    /* Keep the arena's floats finite and moderate: NaN payloads would make "changed" ambiguous. */
    for (size_t i = 0; i + 4 <= ARENA; i += 4) {
        float f = (float)rng_uniform(&rng, -4, 4);
        memcpy(arena + i, &f, 4);
    }
    const int calls = test_quick() ? QUICK_CALLS : CALLS;
    int ok_calls = 0;
    for (int call = 0; call < calls && test_failures < 5; call++)
        fuzz_one(call, &ok_calls);
    printf("  %d calls, %d succeeded and were verified (kernel level %s)\n", calls, ok_calls,
           rp_cpu_kernel_name());
    for (int s = 1; s < 8; s++)
        if (status_counts[s])
            printf("  %5d x %s\n", status_counts[s], rp_status_name((rp_status)s));
    CHECK(ok_calls > calls / 20, "too few valid calls (%d) to mean anything", ok_calls);
    return test_summary("test_fuzz");
}
