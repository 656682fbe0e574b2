/*
 * inputs.c — the seeded host inputs every backend uses, the arguments of one call over them, and
 * the verification of a finished call against the float64 reference (rp_ref_verify).
 */
#include "bench.h"

#include "dtype.h"
#include "internal.h"
#include "ref/verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#  include <sys/mman.h>
#endif

static int use_hugepages;

void bench_alloc_use_hugepages(int on)
{
    use_hugepages = on;
}

void *bench_alloc(size_t bytes)
{
    /* Huge pages need 2 MiB alignment; either way one spare unit keeps rounding safe. */
    const size_t align = use_hugepages ? (size_t)2 << 20 : 64;
    const size_t rounded = (bytes + align - 1) / align * align + align;
    void *p = aligned_alloc(align, rounded);
#ifdef MADV_HUGEPAGE
    if (p && use_hugepages)
        madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}

/* xorshift64*: tiny, fast, and plenty for benchmark inputs. */
typedef struct bench_rng {
    uint64_t x;
} bench_rng;

static uint64_t rng_next(bench_rng *r)
{
    r->x ^= r->x >> 12;
    r->x ^= r->x << 25;
    r->x ^= r->x >> 27;
    return r->x * 0x2545f4914f6cdd1dull;
}

static uint64_t rng_below(bench_rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

static void fill_values(bench_rng *r, void *buf, rp_dtype dtype, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const double x = (double)(rng_next(r) >> 11) * 0x1p-51 - 2.0; /* uniform in [-2, 2) */
        switch (dtype) {
        case RP_F32: ((float *)buf)[i] = (float)x; break;
        case RP_F16: ((uint16_t *)buf)[i] = rp_double_to_f16_bits(x); break;
        default: ((uint16_t *)buf)[i] = rp_double_to_bf16_bits(x); break;
        }
    }
}

static void store_index(void *buf, rp_dtype dtype, int64_t i, int64_t value)
{
    if (dtype == RP_I64)
        ((int64_t *)buf)[i] = value;
    else
        ((int32_t *)buf)[i] = (int32_t)value;
}

size_t bench_rows_bytes(const bench_layout *L, int64_t tokens, int64_t heads)
{
    return (size_t)tokens * (size_t)heads * (size_t)L->d * rp_dtype_size(L->dtype);
}

size_t bench_index_bytes(const bench_layout *L, int64_t tokens)
{
    return (size_t)tokens * rp_dtype_size(L->index_dtype);
}

static int64_t positions_per_token(const bench_layout *L)
{
    return L->positions_per_token > 1 ? L->positions_per_token : 1;
}

size_t bench_positions_bytes(const bench_layout *L, int64_t tokens)
{
    return (size_t)positions_per_token(L) * bench_index_bytes(L, tokens);
}

static size_t pool_elem(const bench_layout *L)
{
    return L->kv_dtype ? 1 : rp_dtype_size(L->dtype);
}

size_t bench_q_bytes(const bench_layout *L, int64_t tokens)
{
    return (size_t)tokens * (size_t)(L->hq * bench_dq(L)) * rp_dtype_size(L->dtype);
}

size_t bench_v_bytes(const bench_layout *L, int64_t tokens)
{
    return (size_t)tokens * (size_t)(L->hk * bench_dv(L)) * rp_dtype_size(L->dtype);
}

size_t bench_pool_bytes(const bench_layout *L, int which)
{
    return (size_t)L->pool_size * (size_t)(L->hk * (which ? bench_dv(L) : L->d)) * pool_elem(L);
}

size_t bench_pool_alloc_bytes(const bench_layout *L, int which)
{
    const int shared = L->latent || L->kv_layout != RP_KV_FLAT;
    if (shared)
        return which ? 0 : bench_pool_bytes(L, 0) + bench_pool_bytes(L, 1);
    return bench_pool_bytes(L, which);
}

double bench_op_bytes(const bench_layout *L, int64_t tokens)
{
    /* q's rotated part read and q_rot written, k read and k_rot written, v read, both pool rows
     * written (an MLA q reads only its q_pe: the rest of its row is not touched) */
    const double es = (double)rp_dtype_size(L->dtype), T = (double)tokens, hk = (double)L->hk;
    const double d = (double)L->d, dv = (double)bench_dv(L);
    return es * T * (2.0 * (double)L->hq * d + 2.0 * hk * d + hk * dv) + (double)pool_elem(L) * T * hk * (d + dv) +
           (double)bench_positions_bytes(L, tokens) + (double)bench_index_bytes(L, tokens);
}

rp_tensor bench_pool_tensor(const bench_layout *L, const bench_buffers *b, int which)
{
    const rp_dtype storage = L->kv_dtype ? RP_U8 : L->dtype;
    const int64_t bs = L->block_size, nb = L->kv_layout ? L->pool_size / bs : 0, hk = L->hk, d = L->d;
    rp_tensor t;
    if (L->latent) { /* one row per slot, [v | k] per head: DeepSeek's [c_kv | k_pe] */
        const int64_t dv = bench_dv(L), head = dv + d;
        char *base = (char *)b->k_pool + (which ? 0 : dv * (int64_t)pool_elem(L));
        t = rp_tensor_3d(base, storage, L->pool_size, hk, which ? dv : d);
        t.strides[0] = hk * head;
        t.strides[1] = head;
        if (L->kv_layout == RP_KV_FLAT)
            return t;
        t.ndim = 4; /* NHD [nb, bs, Hk, head] (bench_options_for refuses HND) */
        t.shape[3] = t.shape[2];
        t.shape[2] = hk;
        t.shape[1] = bs;
        t.shape[0] = nb;
        t.strides[3] = 1;
        t.strides[2] = head;
        t.strides[1] = hk * head;
        t.strides[0] = bs * hk * head;
        return t;
    }
    if (L->kv_layout == RP_KV_FLAT)
        return rp_tensor_3d(which ? b->v_pool : b->k_pool, storage, L->pool_size, hk, which ? bench_dv(L) : d);
    memset(&t, 0, sizeof t);
    t.ndim = 4;
    t.dtype = storage;
    t.shape[0] = nb;
    t.shape[3] = d;
    t.strides[3] = 1;
    int64_t v_offset;
    if (L->kv_layout == RP_KV_NHD) { /* [nb, 2, bs, Hk, D].unbind(1) */
        t.shape[1] = bs;
        t.shape[2] = hk;
        t.strides[0] = 2 * bs * hk * d;
        t.strides[1] = hk * d;
        t.strides[2] = d;
        v_offset = bs * hk * d;
    } else { /* (nb, Hk, bs, 2D).split(D, dim=-1) */
        t.shape[1] = hk;
        t.shape[2] = bs;
        t.strides[0] = 2 * hk * bs * d;
        t.strides[1] = bs * 2 * d;
        t.strides[2] = 2 * d;
        v_offset = d;
    }
    t.data = (char *)b->k_pool + (which ? v_offset * (int64_t)pool_elem(L) : 0);
    return t;
}

char *bench_pool_row(const bench_layout *L, const rp_tensor *pool, int64_t slot, int64_t h)
{
    int64_t offset;
    if (L->kv_layout == RP_KV_FLAT) {
        offset = slot * pool->strides[0] + h * pool->strides[1];
    } else {
        const int nhd = L->kv_layout == RP_KV_NHD;
        offset = slot / L->block_size * pool->strides[0] + slot % L->block_size * pool->strides[nhd ? 1 : 2] +
                 h * pool->strides[nhd ? 2 : 1];
    }
    return (char *)pool->data + offset * (int64_t)pool_elem(L);
}

/* A Fisher-Yates shuffle of [0, pool) kept sparse: only the entries its first steps displaced are
 * stored (open addressing, at most two a step), so drawing T slots costs memory for T, not for the
 * pool (a pool of 2^31 slots is refused by its own allocation, not after 8 GiB of permutation). */
typedef struct sparse_perm {
    int64_t *key, *value; /* key -1: empty */
    size_t mask;
} sparse_perm;

static int sparse_perm_init(sparse_perm *p, int64_t steps)
{
    size_t n = 16;
    while (n < 4 * (size_t)steps)
        n *= 2;
    p->mask = n - 1;
    p->key = malloc(n * sizeof *p->key);
    p->value = malloc(n * sizeof *p->value);
    if (p->key)
        memset(p->key, 0xff, n * sizeof *p->key);
    return p->key && p->value ? 0 : -1;
}

static size_t sparse_perm_find(const sparse_perm *p, int64_t i)
{
    size_t h = ((uint64_t)i * 0x9e3779b97f4a7c15ull) >> 20 & p->mask;
    while (p->key[h] != -1 && p->key[h] != i)
        h = (h + 1) & p->mask;
    return h;
}

static int64_t sparse_perm_get(const sparse_perm *p, int64_t i)
{
    const size_t h = sparse_perm_find(p, i);
    return p->key[h] == i ? p->value[h] : i;
}

static void sparse_perm_set(sparse_perm *p, int64_t i, int64_t v)
{
    const size_t h = sparse_perm_find(p, i);
    p->key[h] = i;
    p->value[h] = v;
}

int bench_inputs_create(bench_inputs *in, const bench_layout *L, int64_t tokens,
                        int64_t max_position, uint64_t seed, char *msg, size_t msg_size)
{
    memset(in, 0, sizeof *in);
    in->tokens = tokens;
    in->q = bench_alloc(bench_q_bytes(L, tokens));
    in->k = bench_alloc(bench_rows_bytes(L, tokens, L->hk));
    in->v = bench_alloc(bench_v_bytes(L, tokens));
    in->positions = bench_alloc(bench_positions_bytes(L, tokens));
    in->slots = bench_alloc(bench_index_bytes(L, tokens));
    /* Distinct slots: the first `tokens` steps of a Fisher-Yates shuffle of [0, pool) */
    sparse_perm perm;
    const int perm_ok = sparse_perm_init(&perm, tokens) == 0;
    if (!in->q || !in->k || !in->v || !in->positions || !in->slots || !perm_ok) {
        free(perm.key);
        free(perm.value);
        bench_inputs_free(in);
        snprintf(msg, msg_size, "out of memory for the inputs of %lld tokens", (long long)tokens);
        return -1;
    }
    bench_rng r = {(seed ^ 0x9e3779b97f4a7c15ull) | 1};
    const int64_t rows = positions_per_token(L);
    const int64_t image_base = rows > 1 ? (int64_t)rng_below(&r, (uint64_t)max_position) : 0;
    fill_values(&r, in->q, L->dtype, bench_q_bytes(L, tokens) / rp_dtype_size(L->dtype));
    fill_values(&r, in->k, L->dtype, bench_rows_bytes(L, tokens, L->hk) / rp_dtype_size(L->dtype));
    fill_values(&r, in->v, L->dtype, bench_v_bytes(L, tokens) / rp_dtype_size(L->dtype));
    for (int64_t t = 0; t < tokens; t++) {
        const int64_t j = t + (int64_t)rng_below(&r, (uint64_t)(L->pool_size - t));
        const int64_t slot = sparse_perm_get(&perm, j);
        sparse_perm_set(&perm, j, sparse_perm_get(&perm, t));
        sparse_perm_set(&perm, t, slot);
        store_index(in->slots, L->index_dtype, t, slot);
        if (rows == 1) {
            store_index(in->positions, L->index_dtype, t, (int64_t)rng_below(&r, (uint64_t)max_position));
        } else { /* an image: t constant, h and w on the grid */
            store_index(in->positions, L->index_dtype, 3 * t, image_base);
            store_index(in->positions, L->index_dtype, 3 * t + 1, image_base + t / BENCH_IMAGE_COLUMNS);
            store_index(in->positions, L->index_dtype, 3 * t + 2, image_base + t % BENCH_IMAGE_COLUMNS);
        }
    }
    free(perm.key);
    free(perm.value);
    return 0;
}

void bench_inputs_free(bench_inputs *in)
{
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->positions);
    free(in->slots);
    memset(in, 0, sizeof *in);
}

rp_rope_pool_args bench_call_args(const bench_layout *L, const bench_buffers *b, int64_t first,
                                  int64_t T, rp_device device)
{
    const size_t es = rp_dtype_size(L->dtype), is = rp_dtype_size(L->index_dtype);
    const int64_t dq = bench_dq(L), dv = bench_dv(L);
    const size_t q_off = (size_t)first * (size_t)(L->hq * L->d) * es;
    const size_t kv_off = (size_t)first * (size_t)(L->hk * L->d) * es;
    rp_rope_pool_args a;
    memset(&a, 0, sizeof a);
    /* q: the last d dims of each dq-wide head (MLA's q_pe = q[..., dq - d:]); the whole head else */
    a.q = rp_tensor_3d((char *)b->q + ((size_t)(first * L->hq * dq) + (size_t)(dq - L->d)) * es, L->dtype, T,
                       L->hq, L->d);
    a.q.strides[0] = L->hq * dq;
    a.q.strides[1] = dq;
    a.k = rp_tensor_3d((char *)b->k + kv_off, L->dtype, T, L->hk, L->d);
    a.v = rp_tensor_3d((char *)b->v + (size_t)(first * L->hk * dv) * es, L->dtype, T, L->hk, dv);
    a.v_head_dim = dv != L->d ? dv : 0;
    const int64_t rows = positions_per_token(L);
    a.positions = rp_tensor_1d((char *)b->positions + (size_t)(first * rows) * is, L->index_dtype, T);
    a.positions.strides[0] = rows; /* a layout without mRoPE on mRoPE inputs reads row t */
    if (L->mrope_section[0] || L->mrope_section[1] || L->mrope_section[2]) { /* [3, T] view of [T, 3] */
        a.positions.ndim = 2;
        a.positions.shape[0] = 3;
        a.positions.shape[1] = T;
        a.positions.strides[0] = 1;
        a.positions.strides[1] = rows;
        memcpy(a.mrope_section, L->mrope_section, sizeof a.mrope_section);
        a.mrope_interleaved = (uint32_t)L->mrope_interleaved;
    }
    a.slots = rp_tensor_1d((char *)b->slots + (size_t)first * is, L->index_dtype, T);
    a.k_pool = bench_pool_tensor(L, b, 0);
    a.v_pool = bench_pool_tensor(L, b, 1);
    a.kv_layout = L->kv_layout;
    a.pool_dtype = L->kv_dtype;
    a.q_rot = rp_tensor_3d((char *)b->q_rot + q_off, L->dtype, T, L->hq, L->d);
    a.k_rot = rp_tensor_3d((char *)b->k_rot + kv_off, L->dtype, T, L->hk, L->d);
    rp_tensor *all[9] = {&a.q, &a.k, &a.v, &a.positions, &a.slots, &a.k_pool, &a.v_pool, &a.q_rot, &a.k_rot};
    for (int i = 0; i < 9; i++)
        all[i]->device = device;
    a.head_dim = L->d;
    a.num_qo_heads = L->hq;
    a.num_kv_heads = L->hk;
    a.rope_base = L->rope_base;
    a.style = L->style;
    a.rotary_dim = L->rotary_dim;
    a.inv_freq = L->inv_freq;
    a.attention_scaling = L->attention_scaling;
    if (L->norm_weights) {
        const char *w = device.type == RP_DEVICE_CUDA ? L->norm_weights_dev : L->norm_weights;
        a.q_norm_weight = w;
        a.k_norm_weight = w + (size_t)L->d * es;
        a.norm_eps = 1e-6;
    }
    return a;
}

void bench_layout_set_variant(bench_layout *L, const bench_options *o)
{
    L->style = o->shape.style;
    L->rotary_dim = o->shape.rotary_dim;
    L->inv_freq = o->has_table ? o->inv_freq : NULL;
    L->attention_scaling = o->has_table ? o->attention_scaling : 0.0;
    memcpy(L->mrope_section, o->shape.mrope_section, sizeof L->mrope_section);
    L->mrope_interleaved = o->shape.mrope_interleaved;
    L->positions_per_token = L->mrope_section[0] || L->mrope_section[1] || L->mrope_section[2] ? 3 : 1;
    L->dq = o->shape.q_head_dim;
    L->dv = o->shape.v_head_dim;
    L->latent = o->shape.latent;
    L->norm_weights = L->norm_weights_dev = NULL;
    if (!o->shape.qk_norm)
        return;
    /* Weights in [0.5, 1.5): trained QK-norm weights are of order 1. Freed with the process. */
    void *w = bench_alloc(2 * (size_t)L->d * rp_dtype_size(L->dtype));
    uint64_t state = 0x514e4f524du;
    for (int64_t i = 0; w && i < 2 * L->d; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const float x = 0.5f + (float)(state >> 40) * 0x1p-24f;
        if (L->dtype == RP_F32)
            ((float *)w)[i] = x;
        else
            ((uint16_t *)w)[i] = L->dtype == RP_F16 ? rp_double_to_f16_bits(x) : rp_double_to_bf16_bits(x);
    }
    L->norm_weights = w;
}

rp_rope_pool_args *bench_set_args(const bench_layout *L, const bench_buffers *b, int64_t T,
                                  int64_t sets, rp_device device, void *stream)
{
    rp_rope_pool_args *args = malloc((size_t)sets * sizeof *args);
    for (int64_t s = 0; args && s < sets; s++) {
        args[s] = bench_call_args(L, b, s * T, T, device);
        args[s].stream = stream;
    }
    return args;
}

int bench_verify(const bench_layout *L, const bench_buffers *b, int64_t tokens, int fused, bench_check *c,
                 char *msg, size_t msg_size)
{
    const rp_device host = {RP_DEVICE_CPU, 0};
    const rp_rope_pool_args a = bench_call_args(L, b, 0, tokens, host);
    char why[256];
    rp_err err = {why, sizeof why};
    rp_problem p;
    if (rp_validate(&a, &p, &err) != RP_OK) {
        snprintf(msg, msg_size, "verification: the outputs do not form a valid call: %s", why);
        return -1;
    }
    double freq[512]; /* head_dim <= 1024; a caller table is used as given */
    rp_problem_fill_freq(&p, freq);
    rp_verify_result r;
    rp_ref_verify_parts(&p, fused ? RP_PARTS_ALL : RP_PARTS_SCATTER, &r);
    c->done = 1;
    c->checked = r.checked;
    c->failures = r.failures;
    c->worst_ratio = r.worst_ratio;
    snprintf(c->first_failure, sizeof c->first_failure, "%s", r.first_failure);
    return 0;
}
