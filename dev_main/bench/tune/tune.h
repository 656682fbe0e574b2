/*
 * tune.h — ropepool-tune-cuda, a developer's tool: times launch plans and kernel experiments of
 * the CUDA backend side by side inside CUDA graphs, next to floor kernels (empty launch, one-load
 * chain, plain copy of the op's bytes). Not installed, not part of `make run`.
 */
#ifndef RP_TUNE_H
#define RP_TUNE_H

#include "ropepool.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TUNE_FLOOR_EMPTY, TUNE_FLOOR_EMPTY_PDL, TUNE_FLOOR_CHAIN_PDL, TUNE_FLOOR_COPY_PDL };

/* Launches call i of a sequence on stream; 0 or -1. */
typedef int (*tune_enqueue_fn)(void *arg, int64_t i, void *stream);

int tune_fill(void *values, size_t n, rp_dtype dtype, void *positions, void *slots, int64_t tokens,
              int64_t max_position, int64_t pool, int contiguous_slots, unsigned long long seed);
int tune_launch_floor(int which, void *stream, const void *src, void *dst, size_t vectors);
int tune_make_graph(void *stream, tune_enqueue_fn enqueue, void *arg, int64_t calls, void **exec);
int tune_replay(void *stream, void *exec, double *seconds);
void tune_destroy_graph(void *exec);

#ifdef __cplusplus
}
#endif

#endif /* RP_TUNE_H */
