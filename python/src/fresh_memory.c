/*
 * fresh_memory.c — where the pages of a newly allocated CPU output come from.
 *
 * A large output (q_rot is 64 MiB at T = 4096 for Llama-3-8B in float32) comes from the allocator
 * as fresh pages of a new mapping: glibc maps blocks of 32 MiB and more with mmap and unmaps them
 * when freed, so every call's outputs are new memory that the kernel must zero page by page when
 * the library's worker threads first store into it — as long as the kernel itself at T = 4096.
 *
 * So outputs of LARGE bytes and more come from a small cache of blocks (the default, "cache"):
 * 2 MiB-aligned mappings with transparent-huge-page advice, handed back to the cache when the
 * array (NumPy: a capsule as its base; torch: the DLPack deleter) is freed, and reused by the
 * next output of that size, already faulted in — what torch's CUDA caching allocator does for
 * device memory. An output takes the smallest cached block that holds it (an engine's T changes
 * from call to call: a cache of exact sizes missed almost every time, 3x slower with T between
 * 1024 and 16384), so a block may be larger than its array; the cache keeps at most CACHE_BLOCKS
 * blocks and ROPEPOOL_OUTPUT_CACHE_MB MiB (default 1024; 0 turns it off), the largest ones (they
 * serve every smaller output): the smallest are unmapped first. Measured in
 * bench/results/python-call-cpu.md.
 *
 * ROPEPOOL_FRESH_OUTPUTS selects the strategy, for measuring it on a machine: "cache" (the
 * default), "huge" (the allocator's pages, with NumPy's huge-page advice given to torch outputs
 * too), "none" (the allocator's pages as they come), "populate" (MADV_POPULATE_WRITE: fault
 * them all in the calling thread before the kernel runs), "huge+populate".
 */
#include "binding.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

enum { ADVISE_HUGE = 1, ADVISE_POPULATE = 2, REUSE = 4, HUGE_PAGE = 2 << 20, LARGE = 4 << 20, CACHE_BLOCKS = 8 };

/* Read at every large allocation (a getenv beside a 4 MiB allocation is free), so that a
 * measurement can switch strategies between rounds in one process. */
static int strategy(void)
{
    const char *s = getenv("ROPEPOOL_FRESH_OUTPUTS");
    return s == NULL || strcmp(s, "cache") == 0 ? REUSE
           : strcmp(s, "huge") == 0            ? ADVISE_HUGE
           : strcmp(s, "populate") == 0        ? ADVISE_POPULATE
           : strcmp(s, "huge+populate") == 0   ? ADVISE_HUGE | ADVISE_POPULATE
           : strcmp(s, "none") == 0            ? 0
                                               : -1; /* refused by the call (take), naming it */
}

static size_t tensor_bytes(const rp_tensor *t)
{
    size_t bytes = rp_dtype_size((rp_dtype)t->dtype);
    for (int d = 0; d < t->ndim && d < RP_MAX_DIMS; d++)
        bytes *= (size_t)t->shape[d];
    return bytes;
}

/* ---- the block cache ------------------------------------------------------------------------ */

#if defined(__linux__) && defined(MADV_HUGEPAGE)
static struct {
    pthread_mutex_t lock;
    void *block[CACHE_BLOCKS + 1]; /* oldest first; one spare entry for rpy_output_block_give */
    size_t bytes[CACHE_BLOCKS + 1];
    int count;
    size_t total;
    /* ROPEPOOL_OUTPUT_CACHE_MB as the last take read it, with the GIL held. give keeps to it: it
     * runs on whichever thread frees an output, perhaps without the GIL, where a getenv could race
     * a Python thread's os.environ update (setenv may move the environment it reads). */
    size_t limit;
} cache = {PTHREAD_MUTEX_INITIALIZER, {0}, {0}, 0, 0, 0};

/* fork() while another thread holds the lock would leave it held forever in the child, whose next
 * large output would then hang. Python's threads take and give blocks holding the GIL, which
 * os.fork() holds too; but torch calls an output's DLPack deleter (give) on whichever thread frees
 * its storage, with or without the GIL, and a C or C++ program embedding Python forks as it likes.
 * The handlers take the lock around the fork, so the child inherits it unlocked, and the cached
 * blocks with it (its own copy-on-write pages, free to reuse). Installed with the first large
 * output: no block is given back before one was taken. */
static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;
static void lock_for_fork(void)
{
    pthread_mutex_lock(&cache.lock);
}
static void unlock_after_fork(void)
{
    pthread_mutex_unlock(&cache.lock);
}
static void install_fork_handlers(void)
{
    (void)pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}

/* Removes entry i of the cache, keeping the others' order (the caller holds the lock and has
 * taken its bytes off total). */
static void drop(int i)
{
    memmove(&cache.block[i], &cache.block[i + 1], (size_t)(cache.count - i - 1) * sizeof(void *));
    memmove(&cache.bytes[i], &cache.bytes[i + 1], (size_t)(cache.count - i - 1) * sizeof(size_t));
    cache.count--;
}

/* Drops the smallest blocks (the oldest of equals) until the cache holds at most CACHE_BLOCKS within
 * cache.limit, into evicted (at most CACHE_BLOCKS + 1), and returns how many: the caller holds the
 * lock, and unmaps them (release_blocks) after releasing it, since unmapping takes a while. */
static int evict(void **evicted, size_t *evicted_bytes)
{
    int num = 0;
    while (cache.count > CACHE_BLOCKS || cache.total > cache.limit) {
        int smallest = 0;
        for (int i = 1; i < cache.count; i++)
            if (cache.bytes[i] < cache.bytes[smallest])
                smallest = i;
        evicted[num] = cache.block[smallest];
        evicted_bytes[num++] = cache.bytes[smallest];
        cache.total -= cache.bytes[smallest];
        drop(smallest);
    }
    return num;
}

static void release_blocks(void *const *blocks, const size_t *bytes, int num)
{
    for (int i = 0; i < num; i++)
        munmap(blocks[i], bytes[i]);
}

/* ROPEPOOL_OUTPUT_CACHE_MB in bytes into *limit; -1 when it is not a whole number of MiB up to
 * 2^30 (take refuses the call then). */
static int cache_limit(size_t *limit)
{
    long long mb;
    const int rc = rpy_env_integer("ROPEPOOL_OUTPUT_CACHE_MB", 0, 1ll << 30, 1024, &mb);
    *limit = rc < 0 ? 0 : (size_t)mb << 20;
    return rc;
}

/* A new 2 MiB-aligned mapping of `bytes` (a multiple of HUGE_PAGE), advised huge; NULL on failure. */
static void *map_block(size_t bytes)
{
    char *p = mmap(NULL, bytes + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    char *aligned = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (aligned > p)
        munmap(p, (size_t)(aligned - p));
    munmap(aligned + bytes, (size_t)(p + HUGE_PAGE - aligned));
    (void)madvise(aligned, bytes, MADV_HUGEPAGE);
    return aligned;
}

void *rpy_output_block_take(const rp_tensor *like, size_t *block_bytes)
{
    const size_t need = tensor_bytes(like);
    size_t limit;
    *block_bytes = 0;
    if (need < LARGE)
        return NULL;
    const int how = strategy(); /* a getenv: only beside a large allocation */
    if (how < 0) {
        rpy_refuse("ROPEPOOL_FRESH_OUTPUTS must be cache, huge, populate, huge+populate or none, got '%s'",
                   getenv("ROPEPOOL_FRESH_OUTPUTS"));
        return NULL;
    }
    if (how != REUSE)
        return NULL;
    if (cache_limit(&limit) < 0) {
        rpy_refuse("ROPEPOOL_OUTPUT_CACHE_MB must be a whole number of MiB from 0 (no cache) to 2^30, got '%s'",
                   getenv("ROPEPOOL_OUTPUT_CACHE_MB"));
        return NULL;
    }
    const size_t bytes = (need + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
    void *found = NULL;
    pthread_once(&fork_handlers_once, install_fork_handlers);
    void *evicted[CACHE_BLOCKS + 1];
    size_t evicted_bytes[CACHE_BLOCKS + 1];
    pthread_mutex_lock(&cache.lock);
    cache.limit = limit; /* a lower limit frees what it no longer holds now, not at the next give */
    const int num_evicted = evict(evicted, evicted_bytes);
    if (limit == 0) {
        pthread_mutex_unlock(&cache.lock);
        release_blocks(evicted, evicted_bytes, num_evicted);
        return NULL;
    }
    int best = -1; /* the smallest block that holds the output, the newest of equals */
    for (int i = cache.count - 1; i >= 0; i--)
        if (cache.bytes[i] >= bytes && (best < 0 || cache.bytes[i] < cache.bytes[best]))
            best = i;
    if (best >= 0) {
        found = cache.block[best];
        *block_bytes = cache.bytes[best];
        cache.total -= cache.bytes[best];
        drop(best);
    }
    pthread_mutex_unlock(&cache.lock);
    release_blocks(evicted, evicted_bytes, num_evicted);
    if (found == NULL) {
        found = map_block(bytes);
        *block_bytes = bytes;
    }
    return found;
}

void rpy_output_block_give(void *block, size_t bytes)
{
    void *evicted[CACHE_BLOCKS + 1];
    size_t evicted_bytes[CACHE_BLOCKS + 1];
    pthread_mutex_lock(&cache.lock);
    if (bytes > cache.limit) {
        pthread_mutex_unlock(&cache.lock);
        munmap(block, bytes);
        return;
    }
    cache.block[cache.count] = block; /* the spare entry: CACHE_BLOCKS + 1 */
    cache.bytes[cache.count++] = bytes;
    cache.total += bytes;
    const int num_evicted = evict(evicted, evicted_bytes);
    pthread_mutex_unlock(&cache.lock);
    release_blocks(evicted, evicted_bytes, num_evicted);
}
#else
void *rpy_output_block_take(const rp_tensor *like, size_t *block_bytes)
{
    (void)like;
    *block_bytes = 0;
    return NULL;
}

void rpy_output_block_give(void *block, size_t bytes)
{
    (void)block;
    (void)bytes;
}
#endif

/* ---- advice for the allocator's pages ------------------------------------------------------- */

void rpy_advise_fresh_output(const rp_tensor *t)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t bytes = tensor_bytes(t);
    if (bytes < LARGE)
        return;
    int how = strategy();
    if (how < 0) /* take refused the call already */
        return;
    if (how == REUSE) /* an output the cache did not serve (turned off, or out of memory) */
        how = ADVISE_HUGE;
    if (how == 0)
        return;
    /* The whole huge pages inside the block: advice is per page, and the block's head and tail
     * may share pages with other allocations. */
    const uintptr_t begin = (uintptr_t)t->data, end = begin + bytes;
    const uintptr_t first = (begin + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1), last = end & ~(uintptr_t)(HUGE_PAGE - 1);
    if (last <= first)
        return;
    /* Advice only: a kernel without THP or MADV_POPULATE_WRITE refuses it, and the output is then
     * faulted as before. */
    if (how & ADVISE_HUGE)
        (void)madvise((void *)first, last - first, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
    if (how & ADVISE_POPULATE)
        (void)madvise((void *)first, last - first, MADV_POPULATE_WRITE);
#endif
#else
    (void)t;
#endif
}
