/*
 * test_cuda_slots.c — what the GPU does with slots and with big or captured calls: a slot >= P is
 * never written (guard rows around the pool stay bit-identical), the lowest offending token is
 * recorded and rp_context_check() reports it with the CPU's text, then clears it; a pool beyond
 * 2^31 elements; a call captured in a CUDA graph and replayed on new inputs.
 */
#include "cuda_test_util.h"

static test_rng rng = {2718};
static rp_context *ctx;

/* The message the CPU gives for these host args (they must fail on the CPU). */
static void cpu_message(const rp_rope_pool_args *host, char *msg, size_t size)
{
    rp_rope_pool_args a = *host;
    CHECK(rp_rope_pool_fused(NULL, &a, msg, size) == RP_ERR_SLOT_OUT_OF_RANGE, "the CPU accepted bad slots");
}

/* A copy of the fixture's slots with every slot >= P replaced by -1: what verification may read. */
static void *slots_without_bad(const fixture *f)
{
    const size_t ie = rp_dtype_size(f->index_dtype);
    void *s = test_alloc((size_t)f->T * ie);
    for (int64_t t = 0; t < f->T; t++) {
        const int64_t slot = rp_load_index(f->slots, f->index_dtype, 1, t);
        test_store(s, f->index_dtype, t, (double)(slot >= f->P ? -1 : slot));
    }
    return s;
}

/* Pools with G guard rows before and after, filled with a pattern; slots P, P + G - 1, 2^40 and
 * negative among valid ones. Guards stay bit-identical, valid rows are right, and the check
 * reports the lowest bad token with the CPU's message, once. */
static void test_slots_past_the_pool_are_never_written(void)
{
    const int64_t G = 4;
    for (int vec = 0; vec < 2; vec++)
        for (int idx = 0; idx < 2; idx++) {
            const int64_t T = 12, Hq = 4, Hk = 2, D = vec ? 64 : 10, P = 32, row = Hk * D;
            const rp_dtype dt = vec ? RP_BF16 : RP_F32, it = idx ? RP_I64 : RP_I32;
            const size_t e = rp_dtype_size(dt), pool_bytes = (size_t)((P + 2 * G) * row) * e;
            fixture f;
            fixture_init(&f, &rng, T, Hq, Hk, D, P, dt, it, 1 << 17, 0);
            test_store(f.slots, it, 3, (double)P);
            test_store(f.slots, it, 7, (double)(P + G - 1));
            test_store(f.slots, it, 9, idx ? (double)((int64_t)1 << 40) : 2147483647.0);
            test_store(f.slots, it, 10, -1);
            void *kmem = test_alloc(pool_bytes), *vmem = test_alloc(pool_bytes);
            fill_random(&rng, kmem, dt, (P + 2 * G) * row, -9, 9);
            fill_random(&rng, vmem, dt, (P + 2 * G) * row, -9, 9);
            void *k0 = test_alloc(pool_bytes), *v0 = test_alloc(pool_bytes);
            memcpy(k0, kmem, pool_bytes);
            memcpy(v0, vmem, pool_bytes);
            f.args.k_pool = rp_tensor_3d((char *)kmem + G * row * e, dt, P, Hk, D);
            f.args.v_pool = rp_tensor_3d((char *)vmem + G * row * e, dt, P, Hk, D);
            char want[512], got[512];
            cpu_message(&f.args, want, sizeof want);

            mirror m = {0};
            mirror_fixture(&m, &f);
            mirror_add(&m, kmem, pool_bytes);
            mirror_add(&m, vmem, pool_bytes);
            rp_rope_pool_args dev = mirror_args(&m, &f.args, 0);
            CHECK(rp_rope_pool_fused(ctx, &dev, got, sizeof got) == RP_OK, "fast path: %s", got);
            mirror_download(&m);
            const size_t guard_bytes = (size_t)(G * row) * e;
            CHECK(memcmp(kmem, k0, guard_bytes) == 0 && memcmp(vmem, v0, guard_bytes) == 0,
                  "D=%lld: a guard row before the pool was written", (long long)D);
            CHECK(memcmp((char *)kmem + pool_bytes - guard_bytes, (char *)k0 + pool_bytes - guard_bytes, guard_bytes) == 0 &&
                      memcmp((char *)vmem + pool_bytes - guard_bytes, (char *)v0 + pool_bytes - guard_bytes, guard_bytes) == 0,
                  "D=%lld %s: a guard row after the pool was written", (long long)D, rp_dtype_name(it));
            void *clean = slots_without_bad(&f);
            rp_rope_pool_args check = f.args;
            check.slots.data = clean;
            verify_outputs(&check, &check, "valid slots among bad ones");
            free(clean);

            const rp_status st = rp_context_check(ctx, NULL, got, sizeof got);
            CHECK(st == RP_ERR_SLOT_OUT_OF_RANGE, "check: %s (%s)", rp_status_name(st), got);
            CHECK(strcmp(got, want) == 0, "check message\n  cuda: %s\n  cpu:  %s", got, want);
            CHECK(rp_context_check(ctx, NULL, got, sizeof got) == RP_OK, "the check did not clear: %s", got);
            mirror_free(&m);
            free(kmem); free(vmem); free(k0); free(v0);
            fixture_free(&f);
        }
}

/* Many blocks race to record: the lowest token always wins, on every repetition;
 * and a call after a finished call with a bad slot raises it at once, without a check. */
static void test_the_lowest_bad_token_is_reported(void)
{
    const int quick = test_quick();
    const int64_t T = quick ? 600 : 4096, P = T + 16;
    const int64_t bad_tokens[3] = {T - 1, quick ? 177 : 777, quick ? 500 : 3000};
    for (int vec = 0; vec < 2; vec++) {
        fixture f;
        fixture_init(&f, &rng, T, 4, 2, vec ? 128 : 6, P, RP_F16, RP_I32, 1 << 17, 1);
        for (int i = 0; i < 3; i++)
            test_store(f.slots, RP_I32, bad_tokens[i], (double)(P + i));
        char want[512], got[512];
        cpu_message(&f.args, want, sizeof want); /* names the lowest bad token, like the CPU */
        mirror m = {0};
        mirror_fixture(&m, &f);
        rp_rope_pool_args dev = mirror_args(&m, &f.args, 0);
        for (int rep = 0; rep < 5; rep++) {
            CHECK(rp_rope_pool_fused(ctx, &dev, got, sizeof got) == RP_OK, "%s", got);
            CHECK(rp_context_check(ctx, NULL, got, sizeof got) == RP_ERR_SLOT_OUT_OF_RANGE && strcmp(got, want) == 0,
                  "repetition %d\n  cuda: %s\n  cpu:  %s", rep, got, want);
        }
        mirror_free(&m);
        fixture_free(&f);
    }

    /* Two calls, the first finished before the second starts: the second raises the first's bad
     * slot without a check or any synchronisation of its own, writes nothing, and the check still
     * reports the first call's record. */
    for (int order = 0; order < 2; order++) {
        fixture a, b;
        fixture_init(&a, &rng, 16, 2, 1, 32, 20, RP_BF16, RP_I64, 1000, 0);
        fixture_init(&b, &rng, 16, 2, 1, 32, 20, RP_BF16, RP_I64, 1000, 0);
        ((int64_t *)a.slots)[10] = 21;
        ((int64_t *)b.slots)[3] = 25;
        mirror ma = {0}, mb = {0};
        mirror_fixture(&ma, &a);
        mirror_fixture(&mb, &b);
        rp_rope_pool_args da = mirror_args(&ma, &a.args, 0), db = mirror_args(&mb, &b.args, 0);
        char got[512];
        CHECK(rp_rope_pool_fused(ctx, order ? &db : &da, got, sizeof got) == RP_OK, "%s", got);
        CUDA_OK(cudaDeviceSynchronize());
        fixture *second = order ? &a : &b;
        unsigned char *q_rot_before = test_alloc((size_t)(16 * 2 * 32) * 2);
        memcpy(q_rot_before, second->q_rot, (size_t)(16 * 2 * 32) * 2);
        const rp_status st = rp_rope_pool_fused(ctx, order ? &da : &db, got, sizeof got);
        CHECK(st == RP_ERR_SLOT_OUT_OF_RANGE &&
                  starts_with(got, order ? "an earlier call on this CUDA context skipped the pool write of its token 3: slot 25 "
                                         : "an earlier call on this CUDA context skipped the pool write of its token 10: slot 21 "),
              "order %d: the next call: %s: %s", order, rp_status_name(st), got);
        mirror_download(order ? &ma : &mb);
        CHECK(memcmp(q_rot_before, second->q_rot, (size_t)(16 * 2 * 32) * 2) == 0, "order %d: the refused call wrote", order);
        CHECK(rp_context_check(ctx, NULL, got, sizeof got) == RP_ERR_SLOT_OUT_OF_RANGE &&
                  starts_with(got, order ? "slot 25 of token 3 is out of range for a pool of 20 slots"
                                         : "slot 21 of token 10 is out of range for a pool of 20 slots"),
              "order %d: %s", order, got);
        CHECK(rp_rope_pool_fused(ctx, order ? &da : &db, got, sizeof got) == RP_OK, "after the check: %s", got);
        CHECK(rp_context_check(ctx, NULL, got, sizeof got) == RP_ERR_SLOT_OUT_OF_RANGE, "second's own slot: %s", got);
        free(q_rot_before);
        mirror_free(&ma);
        mirror_free(&mb);
        fixture_free(&a);
        fixture_free(&b);
    }
}

/* A pool of 2^31 + 2^16 bf16 elements (4 GiB per pool, device only), one guard row after it:
 * rows near its end are written at the right place, their neighbours are not, slot P is refused. */
static void test_pool_beyond_2_pow_31_elements(void)
{
    if (test_quick()) {
        printf("skip: the 8 GiB pool test in quick mode\n");
        return;
    }
    const int64_t T = 6, Hq = 4, Hk = 8, D = 128, row = Hk * D, P = ((int64_t)1 << 21) + 64;
    const size_t e = 2, row_bytes = (size_t)row * e, pool_bytes = (size_t)(P + 1) * row_bytes;
    void *k_pool = NULL, *v_pool = NULL;
    if (cudaMalloc(&k_pool, pool_bytes) != cudaSuccess || cudaMalloc(&v_pool, pool_bytes) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(k_pool);
        printf("skip: cannot allocate 2 x %zu bytes on the device\n", pool_bytes);
        return;
    }
    CUDA_OK(cudaMemset(k_pool, 0x5a, pool_bytes));
    CUDA_OK(cudaMemset(v_pool, 0xa5, pool_bytes));
    const int64_t slots[6] = {P - 1, ((int64_t)1 << 21) + 5, 3, P - 7, (int64_t)1 << 20, P};

    /* Host side: the same call with a small pool whose row i stands for slots[i]. */
    fixture f;
    fixture_init(&f, &rng, T, Hq, Hk, D, T, RP_BF16, RP_I64, 131072, 0);
    for (int t = 0; t < T; t++)
        ((int64_t *)f.slots)[t] = t < T - 1 ? t : -1;
    mirror m = {0};
    mirror_fixture(&m, &f);
    int64_t *dev_slots = NULL;
    CUDA_OK(cudaMalloc((void **)&dev_slots, sizeof slots));
    CUDA_OK(cudaMemcpy(dev_slots, slots, sizeof slots, cudaMemcpyHostToDevice));
    rp_rope_pool_args dev = mirror_args(&m, &f.args, 0);
    dev.slots.data = dev_slots;
    dev.k_pool = rp_tensor_3d(k_pool, RP_BF16, P, Hk, D);
    dev.v_pool = rp_tensor_3d(v_pool, RP_BF16, P, Hk, D);
    dev.k_pool.device = dev.v_pool.device = dev.q.device;
    char got[512];
    CHECK(rp_rope_pool_fused(ctx, &dev, got, sizeof got) == RP_OK, "%s", got);
    CHECK(rp_context_check(ctx, NULL, got, sizeof got) == RP_ERR_SLOT_OUT_OF_RANGE &&
              starts_with(got, "slot 2097216 of token 5 is out of range for a pool of 2097216 slots"),
          "got %s", got);
    mirror_download(&m); /* q_rot, k_rot */
    unsigned char *neighbour = test_alloc(row_bytes);
    for (int t = 0; t < T - 1; t++) {
        CUDA_OK(cudaMemcpy((char *)f.k_pool + t * row_bytes, (char *)k_pool + slots[t] * row_bytes, row_bytes,
                           cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy((char *)f.v_pool + t * row_bytes, (char *)v_pool + slots[t] * row_bytes, row_bytes,
                           cudaMemcpyDeviceToHost));
        for (int side = -1; side <= 1; side += 2) {
            const int64_t s = slots[t] + side;
            int named = 0;
            for (int u = 0; u < T - 1; u++)
                named |= slots[u] == s;
            if (named || s < 0)
                continue;
            CUDA_OK(cudaMemcpy(neighbour, (char *)k_pool + s * row_bytes, row_bytes, cudaMemcpyDeviceToHost));
            int intact = 1;
            for (size_t i = 0; i < row_bytes; i++)
                intact &= neighbour[i] == 0x5a;
            CHECK(intact, "row %lld next to slot %lld was written", (long long)s, (long long)slots[t]);
        }
    }
    CUDA_OK(cudaMemcpy(neighbour, (char *)v_pool + P * row_bytes, row_bytes, cudaMemcpyDeviceToHost));
    int guard = 1;
    for (size_t i = 0; i < row_bytes; i++)
        guard &= neighbour[i] == 0xa5;
    CHECK(guard, "the guard row after the pool (slot P) was written");
    verify_outputs(&f.args, &f.args, "pool beyond 2^31 elements");
    free(neighbour);
    cudaFree(dev_slots);
    cudaFree(k_pool);
    cudaFree(v_pool);
    mirror_free(&m);
    fixture_free(&f);
}

/* Two calls (two layers) captured into a graph in global capture mode (any forbidden runtime call
 * would break the capture), replayed on new inputs; a checked call inside the capture is refused
 * without breaking it; a bad slot in a replay is reported by the check. */
static void test_graph_capture_and_replay(void)
{
    const int64_t T = 64, Hq = 8, Hk = 2, D = 128, P = 256;
    fixture f, g;
    fixture_init(&f, &rng, T, Hq, Hk, D, P, RP_BF16, RP_I64, 131072, 1);
    fixture_init(&g, &rng, T, Hq, Hk, D, P, RP_BF16, RP_I64, 131072, 1);
    /* layer 2 is a variant with a caller table: the table travels in the captured launch */
    const rope_variant gptj = {RP_ROPE_GPTJ, 64, TABLE_F64, 1.2};
    fixture_set_variant(&g, &rng, &gptj);
    mirror m = {0};
    mirror_fixture(&m, &f);
    mirror_fixture(&m, &g);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    rp_rope_pool_args da = mirror_args(&m, &f.args, 0), db = mirror_args(&m, &g.args, 0);
    da.stream = db.stream = stream;
    char msg[512];
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    CHECK(rp_rope_pool_fused(ctx, &da, msg, sizeof msg) == RP_OK, "captured call 1: %s", msg);
    rp_rope_pool_args checked = db;
    checked.flags = RP_CHECK_SLOTS;
    CHECK(rp_rope_pool_fused(ctx, &checked, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT &&
              starts_with(msg, "RP_CHECK_SLOTS waits for the stream"),
          "checked call in a capture: %s", msg);
    CHECK(rp_rope_pool_fused(ctx, &db, msg, sizeof msg) == RP_OK, "captured call 2: %s", msg);
    cudaGraph_t graph;
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    size_t nodes = 0;
    CUDA_OK(cudaGraphGetNodes(graph, NULL, &nodes));
    CHECK(nodes == 2, "the graph has %zu nodes, want 2 (one launch per call)", nodes);

    for (int replay = 0; replay < 3; replay++) {
        fixture *fs[2] = {&f, &g};
        for (int i = 0; i < 2; i++) { /* new q, k, v and positions in the same buffers */
            fill_random(&rng, fs[i]->q, RP_BF16, T * Hq * D, -2, 2);
            fill_random(&rng, fs[i]->k, RP_BF16, T * Hk * D, -2, 2);
            fill_random(&rng, fs[i]->v, RP_BF16, T * Hk * D, -2, 2);
            for (int64_t t = 0; t < T; t++)
                ((int64_t *)fs[i]->positions)[t] = (int64_t)(rng_next(&rng) % 131072);
        }
        if (replay == 2)
            ((int64_t *)g.slots)[40] = P + 7;
        mirror_upload(&m);
        CUDA_OK(cudaGraphLaunch(exec, stream));
        if (replay == 2) { /* a call after the replay has finished raises it, without a check */
            CUDA_OK(cudaStreamSynchronize(stream));
            rp_rope_pool_args again = da;
            CHECK(rp_rope_pool_fused(ctx, &again, msg, sizeof msg) == RP_ERR_SLOT_OUT_OF_RANGE &&
                      strstr(msg, "token 40: slot 263 is out of range for a pool of 256 slots") != NULL,
                  "the call after a bad replay: %s", msg);
        }
        const rp_status st = rp_context_check(ctx, stream, msg, sizeof msg);
        mirror_download(&m);
        verify_outputs(&f.args, &f.args, "graph replay, layer 1");
        if (replay < 2) {
            CHECK(st == RP_OK, "replay %d: %s", replay, msg);
            verify_outputs(&g.args, &g.args, "graph replay, layer 2");
        } else {
            CHECK(st == RP_ERR_SLOT_OUT_OF_RANGE &&
                      starts_with(msg, "slot 263 of token 40 is out of range for a pool of 256 slots"),
                  "bad slot in a replay: %s", msg);
        }
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(stream));
    mirror_free(&m);
    fixture_free(&f);
    fixture_free(&g);
}

int main(void)
{
    if (cuda_test_no_gpu())
        return CUDA_TEST_SKIP;
    ctx = cuda_test_context(0);
    RUN(test_slots_past_the_pool_are_never_written);
    RUN(test_the_lowest_bad_token_is_reported);
    RUN(test_pool_beyond_2_pow_31_elements);
    RUN(test_graph_capture_and_replay);
    rp_context_destroy(ctx);
    return test_summary("test_cuda_slots");
}
