/*
 * fresh_memory.c — how the pages of a newly allocated CPU output are first touched.
 *
 * A large output (q_rot is 64 MiB at T = 4096 for Llama-3-8B in float32) comes from the allocator
 * as fresh pages of a new mapping: glibc maps blocks of 32 MiB and more with mmap and unmaps them
 * when freed, so every call's outputs are new memory that the kernel must zero page by page when
 * the library's worker threads first store into it. With 4 KiB pages that is one fault per page
 * (20,480 per call at T = 4096); NumPy asks for transparent huge pages for its large arrays
 * (madvise MADV_HUGEPAGE, 4 MiB and up), torch does not. This file gives torch outputs the same
 * advice, so that both frameworks fault 2 MiB at a time; the zeroing itself stays (fresh memory
 * must be zeroed) and is what q_out / k_out avoid. Measured in bench/results/python-call-cpu.md.
 *
 * ROPEPOOL_FRESH_OUTPUTS selects the strategy, for measuring it on a machine: "huge" (the
 * default), "none" (the allocator's pages as they come), "populate" (MADV_POPULATE_WRITE: fault
 * them all in the calling thread before the kernel runs), "huge+populate".
 */
#include "binding.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

enum { ADVISE_HUGE = 1, ADVISE_POPULATE = 2, HUGE_PAGE = 2 << 20, LARGE = 4 << 20 };

static int strategy(void)
{
    static int chosen = -1; /* read once; calls hold the GIL */
    if (chosen < 0) {
        const char *s = getenv("ROPEPOOL_FRESH_OUTPUTS");
        chosen = s == NULL || strcmp(s, "huge") == 0 ? ADVISE_HUGE
                 : strcmp(s, "populate") == 0        ? ADVISE_POPULATE
                 : strcmp(s, "huge+populate") == 0   ? ADVISE_HUGE | ADVISE_POPULATE
                                                     : 0;
    }
    return chosen;
}

void rpy_advise_fresh_output(const rp_tensor *t)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    size_t bytes = rp_dtype_size((rp_dtype)t->dtype);
    for (int d = 0; d < t->ndim && d < RP_MAX_DIMS; d++)
        bytes *= (size_t)t->shape[d];
    const int how = strategy();
    if (bytes < LARGE || how == 0)
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
