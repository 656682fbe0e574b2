/*
 * freq.c — the RoPE frequency table rope_base^(-2j/R) (R = rotary_dim), computed once per context.
 * A caller's own table (rp_rope_pool_args.inv_freq) is used as given and never cached.
 *
 * The contract is stated against float64 frequencies, and at position 2^31 one ulp of a
 * frequency moves the angle by 2^-22 rad, half the error budget. So every backend uses these
 * exact libm values (never a recurrence or a float32 pow), and a context caches the last table
 * because rotary_dim/2 calls to pow() would cost more than a whole decode-size call.
 */
#include "context.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void rp_compute_inv_freq(double rope_base, int64_t rotary_dim, double *inv_freq)
{
    for (int64_t j = 0; j < rotary_dim / 2; j++)
        inv_freq[j] = pow(rope_base, -(double)(2 * j) / (double)rotary_dim);
}

void rp_problem_fill_freq(rp_problem *p, double *buf)
{
    if (p->inv_freq != NULL)
        return;
    rp_compute_inv_freq(p->rope_base, p->rotary_dim, buf);
    p->inv_freq = buf;
}

void rp_context_inv_freq(rp_context *ctx, double rope_base, int64_t rotary_dim, double *inv_freq)
{
    const size_t bytes = (size_t)(rotary_dim / 2) * sizeof(double);
    if (ctx == NULL || rp_context_made_before_fork(ctx)) { /* a fork child: freq_lock may be held */
        rp_compute_inv_freq(rope_base, rotary_dim, inv_freq);
        return;
    }
    pthread_mutex_lock(&ctx->freq_lock);
    if (ctx->freq == NULL || ctx->freq_base != rope_base || ctx->freq_dim != rotary_dim) {
        double *table = realloc(ctx->freq, bytes ? bytes : 1);
        if (table == NULL) { /* keep working without the cache */
            pthread_mutex_unlock(&ctx->freq_lock);
            rp_compute_inv_freq(rope_base, rotary_dim, inv_freq);
            return;
        }
        rp_compute_inv_freq(rope_base, rotary_dim, table);
        ctx->freq = table;
        ctx->freq_base = rope_base;
        ctx->freq_dim = rotary_dim;
    }
    memcpy(inv_freq, ctx->freq, bytes);
    pthread_mutex_unlock(&ctx->freq_lock);
}
