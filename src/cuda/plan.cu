/*
 * plan.cu — rp_cuda_make_plan, the one function that chooses a call's kernel and launch geometry.
 */
#include "kernels.cuh"

#include <limits.h>
#include <string.h>

enum {
    STRIDED_THREADS = 256,
    MAX_GROUPS = 512,          /* frequency groups of a head row the vectorized kernel takes */
    /* Tuned on an H200 (bench/results/cuda-*.md): a call is "large" from this many tokens per
     * multiprocessor; its threads then prefetch this many heads. Smaller calls give each block
     * this many frequency groups of a token. */
    LARGE_CALL_TOKENS_PER_SM = 4,
    /* QK-norm: the decode kernel serves a call while its blocks are all resident at once (its
     * build's threads a multiprocessor: cuda_backend.h), up to this many tokens a
     * multiprocessor: Qwen3-8B at T = 160, three head chunks, 2.99 us against the prefill
     * kernel's 4.57; blocks that no longer all fit gained nothing (4.76), and from T = 256 the
     * prefill kernel wins (4.79 against 5.28) (bench/results/qwen3-8b-qk-norm.md); 32/4/64 at
     * T = 300 (three tokens a multiprocessor, resident): 3.14 us against 5.0 (an H100,
     * cuda-h100-stop33-plan-ab.log). The 80-register build fits 1.5 times the blocks: Qwen3-8B at
     * T = 256 3.98 us against the prefill kernel's 4.86 (an H100, stop 40). */
    MAX_NORM_DECODE_TOKENS_PER_SM = 3,
    LARGE_CALL_PREFETCH = RP_PREFILL_PREFETCH,
    /* Prefill: a token's heads are spread over at most this many threads (each then serves
     * heads/threads of them, the first RP_PREFILL_PREFETCH prefetched), unless the call is too
     * small to fill the machine so. Three warps a token (eight tokens a multiprocessor) beat one
     * thread per two heads by 1-17% at T >= 1024 on each of the eight shapes measured that had
     * more than 96 threads a token (bench/results/plan-h200.md). */
    PREFILL_THREADS_PER_TOKEN = 96,
    /* Deep calls (from this many tokens per multiprocessor): a token whose threads end in part of
     * a warp (few heads: 40 threads for 8/1/128, 52 for MLA at TP 8, 80 for 32/4/64) takes whole
     * warps instead, or a power-of-two part of one packed with other tokens, each thread serving
     * at least this many heads: 2-35% faster from T = 6144 (ropepool-bench, cold); at T = 2048-4096,
     * below the threshold, up to 27% slower (bench/results/plan-h200.md). Whole warps of fewer
     * heads a thread (96 threads of 28/4/128) measured the same either way and are left so. Three,
     * not four: MLA at TP 8 (25 heads of 64) then takes a warp a token (3.1 heads a thread)
     * instead of 16 threads (6.3), 10% / 5% / 2% faster at T = 8192 / 16384 / 65536, and each other
     * shape the change moves (24/1/64, 8/2/128, 8/8/64, 32/8/80, 16/2/96, f32 4/1/128 and
     * 12/4/96) 0-22% faster (an H100, bench/results/cuda-h100-stop44-deep.md); 8/1/128 and
     * 32/4/64 keep their geometry. */
    DEEP_CALL_TOKENS_PER_SM = 40,
    DEEP_CALL_HEADS_PER_THREAD = 3,
    /* A prefill block takes whole tokens up to at least this many threads ("one measured best"
     * for tokens of 64 or more). A narrower token that does not divide it rounds up: MLA at TP 8
     * (52 threads) two tokens a block, 0.91-0.97 of the time at T = 600-4096 hot and cold, fp8
     * too; 8/1/128 (40 threads) 0.76-0.88 at T = 2048-4096, 1.03-1.04 at T = 600-1024 (an H100,
     * bench/results/cuda-h100-stop49-mla-passes.md). */
    MIN_LARGE_CALL_BLOCK_THREADS = 64,
    /* Decode: a token's groups are split over blocks of this many (or 2); four groups (D = 64 in
     * 16-bit) in one block ran 4-27% faster than two blocks of two at T = 1-256 on 32/4/64, 8/1/64
     * and MLA at TP 8 (plan-h200.md). */
    DECODE_GROUPS_PER_BLOCK = 4,
    /* A decode call of at least one and a half waves of blocks (wave_sms; a wave is 2 tokens a
     * multiprocessor for Llama-3-8B's heads, 1.5 for 16/8/256, 1 for 64/8/128 or MLA's 137 heads)
     * launches only one wave, each block looping over tokens: 10-28% faster at T = 200-512 with
     * the inputs in L2, 17% faster to 2% slower cold (an H100,
     * bench/results/cuda-h100-stop41-decode-wave.md). Just past one wave the hardware's
     * scheduler, which hands the few extra tokens to whichever blocks finish first, ran cold
     * calls 3-11% faster than blocks that each loop (5-10% slower hot). */
    /* QK-norm decode: a token's heads are split over blocks of at least this many threads (grid
     * z), so that its long chain of instructions (680 a warp for Qwen3-8B at T = 1, against 404
     * without norm: cuda-h200-stop29-ncu.txt) runs on several multiprocessors instead of one. */
    NORM_DECODE_BLOCK_THREADS = 128,
    MAX_NORM_DECODE_CHUNKS = 64,
    /* Decode of a token wider than half a multiprocessor's threads (DeepSeek-V3 MLA: 137 heads of
     * 4 groups, 548 threads, one block a multiprocessor): from two blocks a multiprocessor its
     * heads are taken in up to this many passes of narrower blocks (decode_pass_heads). */
    MAX_DECODE_PASSES = 8,
    MAX_HEAD_CHUNKS = 65535, /* gridDim.z */
    MAX_TABLE_BYTES = 48 * 1024,
    MAX_TOKENS_PER_BLOCK = 64, /* blockDim.z */
};
static const long long MAX_GRID = INT_MAX;

/* A [., ., D] tensor takes 16-byte vectors when its rows start on 16 bytes. Strides of a
 * dimension of extent 1 are never used. */
static int rows_aligned(const void *data, const int64_t stride[3], int64_t n0, int64_t n1, size_t elem)
{
    return (uintptr_t)data % 16 == 0 && (n0 <= 1 || (stride[0] * (int64_t)elem) % 16 == 0) &&
           (n1 <= 1 || (stride[1] * (int64_t)elem) % 16 == 0);
}

/* A pool ([block, row, head, dim] strides, pool.h) takes the vectorized kernels' stores when its
 * rows start on `align` bytes: 16 for the dtype's vectors, ELEMS bytes for fp8 codes. */
static int pool_rows_aligned(const void *data, const int64_t stride[4], const rp_problem *p, size_t elem,
                             long long align)
{
    const int64_t extent[3] = {p->num_blocks, p->block_size, p->num_kv_heads};
    int ok = (uintptr_t)data % (uintptr_t)align == 0;
    for (int d = 0; d < 3; d++)
        ok &= extent[d] <= 1 || (stride[d] * (int64_t)elem) % align == 0;
    return ok;
}

static long long div_up(long long a, long long b)
{
    return (a + b - 1) / b;
}

/* QK-norm, prefill kernel: q's and k's weights staged in shared memory before the table
 * (qk_norm.cuh). */
static long long staged_weight_bytes(const rp_problem *p, rp_parts parts, int items_per_thread)
{
    const int norm = rp_has_qk_norm(p);
    return norm && items_per_thread > 1 && parts != RP_PARTS_SCATTER ? 2 * p->head_dim * (long long)sizeof(float) : 0;
}

int rp_cuda_plan_complete(const rp_problem *p, rp_parts parts, rp_cuda_plan *plan)
{
    const long long per_vector = 16 / (long long)rp_dtype_size(p->dtype), groups = p->head_dim / 2 / per_vector;
    const long long gb = plan->groups_per_block, hy = plan->heads_per_pass, y = plan->tokens_per_block;
    const int norm = rp_has_qk_norm(p), norm_decode = norm && plan->items_per_thread == 1;
    if (!norm_decode)
        plan->norm_decode_threads = 0;
    else if (plan->norm_decode_threads != RP_NORM_DECODE_RESIDENT)
        plan->norm_decode_threads = RP_NORM_DECODE_SHORT;
    const long long limit = norm_decode ? plan->norm_decode_threads : rp_block_threads(plan->items_per_thread);
    if (gb < 1 || hy < 1 || y < 1 || y > MAX_TOKENS_PER_BLOCK || groups % gb != 0 || gb * hy * y > limit)
        return -1;
    if (norm && (gb != groups || gb * hy % 32 != 0))
        return -1; /* QK-norm reduces a head over the block's x lanes, in whole warps (qk_norm.cuh) */
    const long long staged_bytes = staged_weight_bytes(p, parts, plan->items_per_thread);
    const long long table_bytes = y * gb * per_vector * 2 * (long long)sizeof(float);
    if (staged_bytes + table_bytes > MAX_TABLE_BYTES)
        return -1;
    plan->chunks = (int)(groups / gb);
    /* QK-norm decode: chunks of hy heads a block (grid z); other kernels loop over a token's heads */
    const long long head_chunks = norm_decode ? div_up(plan->heads, hy) : 1;
    if (head_chunks > MAX_HEAD_CHUNKS)
        return -1; /* that kernel serves one chunk a block, never loops over further heads (decode.cu) */
    plan->head_chunks = (int)head_chunks;
    const long long tiles = div_up(p->num_tokens, y);
    plan->grid = (unsigned)(tiles < MAX_GRID ? tiles : MAX_GRID);
    if (plan->wave_sms > 0 && plan->items_per_thread == 1 && !norm) {
        /* one wave: the blocks a multiprocessor holds at the launch bound's threads, in whole warps */
        const long long per_sm = limit / 32 / div_up(gb * hy * y, 32);
        const long long wave = plan->wave_sms * (per_sm > 1 ? per_sm : 1), most = wave / (plan->chunks * head_chunks);
        if (most >= 1 && 2 * tiles * plan->chunks * head_chunks >= 3 * wave)
            plan->grid = (unsigned)most;
    }
    plan->shared_bytes = parts == RP_PARTS_SCATTER ? 0 : (size_t)(staged_bytes + table_bytes);
    return 0;
}

/* QK-norm decode: the heads a block takes (hy) when a token's `heads` are split into chunks of
 * whole warps (gb lanes a head), or 0 where none serves. Of 1 .. MAX_NORM_DECODE_CHUNKS chunks of
 * at least NORM_DECODE_BLOCK_THREADS threads, the fewest warps on the busiest multiprocessor
 * (T x chunks blocks over sms), ties to fewer chunks; must_fit: only where every block is resident
 * at once (limit, the kernel's launch bound, is also the threads a multiprocessor holds: the bound
 * caps its registers at 65536 / limit). Qwen3-8B on the H200 (cuda-h200-stop31-qknorm-ab*.log):
 * three chunks at T = 1 and 16, two at 64, one at 128, each the fastest or within 1% of it among
 * 1, 2, 3 and 6; three at T = 133-176. */
static long long norm_decode_heads(long long T, long long sms, long long heads, long long gb, long long limit,
                                   int must_fit)
{
    const long long least = NORM_DECODE_BLOCK_THREADS / gb > 1 ? NORM_DECODE_BLOCK_THREADS / gb : 1;
    long long best_hy = 0, best_warps = 0;
    for (long long c = 1; c <= div_up(heads, least) && c <= MAX_NORM_DECODE_CHUNKS; c++) {
        const long long hy = div_up(div_up(heads, c) * gb, 32) * 32 / gb;
        if (hy * gb > limit || (c > 1 && div_up(heads, hy) != c))
            continue; /* too wide a block, or the same blocks as fewer chunks */
        const long long blocks_per_sm = div_up(T * c, sms), warps = blocks_per_sm * hy * gb / 32;
        if (must_fit && blocks_per_sm > limit / (hy * gb))
            continue;
        if (best_hy == 0 || warps < best_warps) {
            best_hy = hy;
            best_warps = warps;
        }
    }
    return best_hy;
}

/* Plain decode: the heads a block takes in one pass (the kernel loops over the token's others),
 * for `blocks` blocks of `heads` heads of gb lanes over sms multiprocessors of `limit` threads. A
 * token that fits twice in a multiprocessor keeps one pass (the wave rule then applies). A wider
 * one (one block a multiprocessor) takes the fewest passes whose blocks are all resident at once.
 * MLA's 137 heads on an H100's 132 multiprocessors: at T = 256 two passes (blocks of 69 heads,
 * two a multiprocessor) 3.41 us against 3.96 for one wave of whole tokens, each block serving two
 * in turn (cold 5.84 against 6.05); at T = 512 three (46 heads, four a multiprocessor) 4.73
 * against 6.86 (cold 8.64 against 10.90); at T = 128, a token a multiprocessor, one pass 2.56
 * against two passes' 3.12. 128/8/128 and 96/8/128 (two blocks a token) at T = 256-512, up to
 * eight passes: 0.65-0.82 of the time hot, 0.75-0.86 cold; Llama-3-8B's plans are unchanged
 * (bench/results/cuda-h100-stop49-mla-passes.md). */
static long long decode_pass_heads(long long blocks, long long sms, long long heads, long long gb, long long limit)
{
    if (2 * div_up(heads * gb, 32) * 32 <= limit)
        return heads;
    const long long per_sm = div_up(blocks, sms);
    for (long long passes = 1; passes <= MAX_DECODE_PASSES; passes++) {
        const long long hy = div_up(heads, passes);
        if (limit / (div_up(hy * gb, 32) * 32) >= per_sm)
            return hy;
    }
    return heads; /* more tokens than that: one wave of whole tokens (rp_cuda_plan_complete) */
}

/* Prefill: the heads a thread row takes (hy, at most `heads`) when a token may take `threads`
 * threads, at least PREFILL_THREADS_PER_TOKEN, in whole warps: 112 threads a token ran 9-17%
 * slower than 96 or 128 (plan-h200.md); the fewest heads a thread, spread evenly. */
static long long prefill_heads(long long hy, long long heads, long long gb, long long threads)
{
    const long long step = 32 % gb == 0 ? 32 / gb : 1;
    const long long floor_threads = PREFILL_THREADS_PER_TOKEN;
    const long long most = (threads > floor_threads ? threads : floor_threads) / gb / step * step;
    if (most >= 1 && hy > most)
        hy = div_up(div_up(heads, div_up(heads, most)), step) * step;
    return hy;
}

rp_cuda_plan rp_cuda_make_plan(const rp_cuda_state *st, const rp_problem *p, rp_parts parts)
{
    rp_cuda_plan plan;
    memset(&plan, 0, sizeof plan);
    const size_t elem = rp_dtype_size(p->dtype);
    const long long T = p->num_tokens, half_dim = p->head_dim / 2, per_vector = 16 / (long long)elem;
    const long long Hq = p->num_qo_heads, Hk = p->num_kv_heads;
    /* v heads wider than k's (MLA's latent row: Dv = 512 of c_kv beside D = 64 of k_pe) take the
     * vectorized kernels as Dv / D pieces of D dims each, when a whole number of pieces and the
     * pieces of consecutive heads lie end to end in v and in v_pool (or there is one head). */
    const long long v_pieces = p->v_head_dim % p->head_dim == 0 ? p->v_head_dim / p->head_dim : 0;
    const int v_as_heads = v_pieces == 1 || (v_pieces > 1 && (Hk == 1 || (p->v_stride[1] == p->v_head_dim &&
                                                                          p->v_pool_stride[2] == p->v_head_dim)));
    const long long Hv = v_as_heads ? Hk * v_pieces : Hk;
    const long long heads = parts == RP_PARTS_ALL ? Hq + Hk + Hv : parts == RP_PARTS_ROTATE ? Hq + Hk : Hk + Hv;
    const long long groups = half_dim / per_vector;

    const int fp8 = rp_pool_is_fp8(p);
    const size_t pool_elem = fp8 ? 1 : elem;
    const long long pool_align = fp8 ? per_vector : 16;
    /* Every group (items.cuh) is two whole vectors: rotated pairs and pass-through dims alike; v
     * heads as wide as k's or in pieces as wide (others: the strided kernel). */
    plan.vectorized = p->inner_contiguous && half_dim % per_vector == 0 && (p->rotary_dim / 2) % per_vector == 0 &&
                      (p->style != RP_ROPE_GPTJ || (p->rotary_dim / 2) % 2 == 0) &&
                      v_as_heads && groups <= MAX_GROUPS &&
                      (!fp8 || p->rotary_dim / 2 <= RP_VECTOR_FP8_MAX_PAIRS) &&
                      heads <= INT_MAX / 2 &&
                      rows_aligned(p->q, p->q_stride, T, Hq, elem) &&
                      rows_aligned(p->k, p->k_stride, T, Hk, elem) &&
                      rows_aligned(p->v, p->v_stride, T, Hk, elem) &&
                      rows_aligned(p->q_rot, p->q_rot_stride, T, Hq, elem) &&
                      rows_aligned(p->k_rot, p->k_rot_stride, T, Hk, elem) &&
                      pool_rows_aligned(p->k_pool, p->k_pool_stride, p, pool_elem, pool_align) &&
                      pool_rows_aligned(p->v_pool, p->v_pool_stride, p, pool_elem, pool_align);
    /* QK-norm reduces each head over its groups, the block's x lanes: a power of two up to a warp
     * (qk_norm.cuh). */
    const int norm = rp_has_qk_norm(p);
    if (norm && (groups > 32 || (groups & (groups - 1)) != 0))
        plan.vectorized = 0;
    plan.overlap_launch = st->compute_capability >= 90;
    if (!plan.vectorized) {
        plan.threads_x = STRIDED_THREADS;
        const long long width = half_dim > (p->v_head_dim + 1) / 2 ? half_dim : (p->v_head_dim + 1) / 2;
        const long long blocks = div_up(T * width, STRIDED_THREADS);
        const long long cap = (long long)st->num_sms * 64;
        plan.grid = (unsigned)(blocks < cap ? blocks : cap);
        return plan;
    }
    /* Small calls (decode) are bound by a chain of latencies and by the instructions of the few
     * multiprocessors they occupy: each token's frequency groups are split over several blocks
     * (DECODE_GROUPS_PER_BLOCK, or 2, each: 64 or 32 contiguous bytes per head row), one head per
     * thread: the decode kernel. Large calls (prefill) are bound by the bytes each multiprocessor
     * keeps in flight: a block serves whole tokens and each thread prefetches several heads (the
     * prefill kernel; with few heads a token, prefetch drops to 1 and the decode kernel runs). */
    const long long sms = st->num_sms > 0 ? st->num_sms : 1;
    long long norm_hy = 0; /* QK-norm decode's heads a block; 0: the prefill kernel */
    int norm_build = RP_NORM_DECODE_SHORT;
    if (norm && T < MAX_NORM_DECODE_TOKENS_PER_SM * sms) {
        /* the short build where its blocks all fit at once, else the resident one where they do */
        norm_hy = norm_decode_heads(T, sms, heads, groups, RP_NORM_DECODE_SHORT, 1);
        if (norm_hy == 0) {
            norm_build = RP_NORM_DECODE_RESIDENT;
            norm_hy = norm_decode_heads(T, sms, heads, groups, RP_NORM_DECODE_RESIDENT, 1);
        }
        if (norm_hy == 0 && T < sms) { /* below a token a multiprocessor, decode even where blocks wait */
            norm_build = RP_NORM_DECODE_SHORT;
            norm_hy = norm_decode_heads(T, sms, heads, groups, RP_NORM_DECODE_SHORT, 0);
        }
    }
    const int large = norm ? norm_hy == 0 : T >= LARGE_CALL_TOKENS_PER_SM * sms;
    long long gb = groups; /* a token of at most DECODE_GROUPS_PER_BLOCK groups stays in one block */
    if (!large && !norm && groups > DECODE_GROUPS_PER_BLOCK)
        gb = groups % DECODE_GROUPS_PER_BLOCK == 0 ? (long long)DECODE_GROUPS_PER_BLOCK : groups % 2 == 0 ? 2 : groups;
    int prefetch = large ? LARGE_CALL_PREFETCH : 1;
    while (prefetch > 1 && heads * gb < (long long)prefetch * 32)
        prefetch /= 2; /* keep at least a warp of threads per token */
    const long long limit = norm && prefetch == 1 ? norm_build : rp_block_threads(prefetch);
    /* QK-norm: an item's chain (loads, reduction, normalisation, rotation) is long, so while one
     * wave of the call's tokens allows (below), a thread serves one head: Qwen3-8B at T = 256,
     * 4.79 us against 5.25 with two heads a thread (ropepool-tune-cuda, qwen3-8b-qk-norm.md) */
    long long hy = norm && prefetch > 1 ? heads : div_up(heads, prefetch);
    if (prefetch > 1) {
        /* threads a token may take: as many as one wave of the call's tokens leaves it (at the
         * launch bound's threads a multiprocessor). QK-norm (a head a thread: wide tokens): where
         * the busiest multiprocessor's whole tokens then do not fit at once, as many as they
         * leave each. 16/8/256 at T = 160 took blocks of 512 threads, one a multiprocessor, 28
         * of them serving two in turn: 8.47 us, now 6.42; 24-34% faster wherever it applies
         * (16/8/256, 28/4/128, 12/4/128, 32/4/64). The plain calls it would change ran up to
         * 44% slower (gpt-j-6b and DeepSeek-V3 MLA at T = 529-633): cuda-h100-stop33-plan-ab.log */
        hy = prefill_heads(hy, heads, gb, sms * limit / T);
        const long long tokens_per_sm = div_up(T, sms);
        if (norm && tokens_per_sm * hy * gb > limit)
            hy = prefill_heads(hy, heads, gb, limit / tokens_per_sm);
        if (T >= DEEP_CALL_TOKENS_PER_SM * sms && hy * gb % 32 != 0) {
            const long long threads = heads * gb / DEEP_CALL_HEADS_PER_THREAD;
            long long part = 32;
            while (threads < part && part > gb)
                part /= 2;
            const long long deep_hy = threads / part * part / gb;
            if (deep_hy >= 1 && deep_hy < hy)
                hy = deep_hy;
        }
    }
    if (norm && prefetch == 1)
        hy = norm_hy > 0 ? norm_hy : hy; /* decode: a token's heads in chunks (norm_decode_heads) */
    else if (!large && prefetch == 1)
        hy = decode_pass_heads(T * (groups / gb), sms, hy, gb, limit); /* plain decode */
    if (norm) /* whole warps: QK-norm's shuffles then take the full mask (qk_norm.cuh) */
        hy = div_up(hy * gb, 32) * 32 / gb;
    if (hy * gb > limit)
        hy = limit / gb;
    long long y = large ? div_up(MIN_LARGE_CALL_BLOCK_THREADS, hy * gb) : 1;
    if (y * hy * gb > limit)
        y = limit / (hy * gb);
    const long long table_bytes_per_token = gb * per_vector * 2 * (long long)sizeof(float);
    const long long staged_bytes = staged_weight_bytes(p, parts, prefetch);
    if (y * table_bytes_per_token > MAX_TABLE_BYTES - staged_bytes)
        y = (MAX_TABLE_BYTES - staged_bytes) / table_bytes_per_token;
    if (y > MAX_TOKENS_PER_BLOCK)
        y = MAX_TOKENS_PER_BLOCK;
    if (y < 1)
        y = 1;
    plan.groups_per_block = (int)gb;
    plan.heads = (int)heads;
    plan.v_pieces = (int)v_pieces;
    plan.heads_per_pass = (int)hy;
    plan.items_per_thread = prefetch;
    plan.tokens_per_block = (int)y;
    plan.norm_decode_threads = norm_hy > 0 ? norm_build : 0;
    plan.wave_sms = !large && !norm ? (int)sms : 0;
    rp_cuda_plan_complete(p, parts, &plan); /* cannot refuse: the bounds above are its bounds */
    return plan;
}
