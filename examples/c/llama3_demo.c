/* Calling a ropegen C kernel from plain C: Llama-3-8B RoPE (examples/llama3.rope, llama3_8b).
 *
 * The kernel's header and source come from `ropegen compile examples/llama3.rope --target c`
 * (generated/llama3/c/llama3_8b.{h,c}). This program rotates a few bf16 tokens, in place and
 * out of place, and checks values it can work out on its own: position 0 leaves q unchanged,
 * pair column 0 turns by exactly `position` radians (its inverse frequency is 1), every pair keeps
 * its length, and an out-of-range call is refused. Exit status 0 when every check passes.
 *
 * Build: see the Makefile next to this file.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama3_8b.h"

enum { TOKENS = 5, QH = 32, KH = 8, D = 128 };

static uint16_t to_bf16(float f)      /* round to nearest even, as ropegen does */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int failures = 0;

static void expect(int ok, const char *what)
{
    printf("%-58s %s\n", what, ok ? "ok" : "FAILED");
    if (!ok) failures++;
}

int main(void)
{
    static uint16_t q[TOKENS * QH * D], k[TOKENS * KH * D], q_rot[TOKENS * QH * D], k_rot[TOKENS * KH * D];
    const int64_t positions[TOKENS] = {0, 1, 7, 100, 8191};
    for (int i = 0; i < TOKENS * QH * D; ++i) q[i] = to_bf16((float)sin(0.37 * i) * 2.0f);
    for (int i = 0; i < TOKENS * KH * D; ++i) k[i] = to_bf16((float)cos(0.11 * i));

    /* contiguous [T, heads, head_dim]: token stride heads * D, head stride D (in elements) */
    int status = ropegen_llama3_8b(q, QH * D, D, k, KH * D, D, positions,
                                   q_rot, QH * D, D, k_rot, KH * D, D, TOKENS, 2);
    expect(status == ROPEGEN_OK, "status ROPEGEN_OK");
    expect(memcmp(q_rot, q, QH * D * sizeof q[0]) == 0, "position 0: q unchanged");

    double worst = 0.0;
    for (int t = 1; t < TOKENS; ++t) {
        const uint16_t *x = q + (size_t)t * QH * D, *y = q_rot + (size_t)t * QH * D;
        /* pair (0, 64) of head 0: column 0, theta = position * 1 */
        const double xa = from_bf16(x[0]), xb = from_bf16(x[64]);
        const double want_a = xa * cos((double)positions[t]) - xb * sin((double)positions[t]);
        const double want_b = xb * cos((double)positions[t]) + xa * sin((double)positions[t]);
        worst = fmax(worst, fabs(from_bf16(y[0]) - want_a) / (fabs(xa) + fabs(xb)));
        worst = fmax(worst, fabs(from_bf16(y[64]) - want_b) / (fabs(xa) + fabs(xb)));
    }
    expect(worst < 1.0 / 128, "column 0 turns by the position (bf16 accuracy)");

    double len_err = 0.0;
    for (int t = 0; t < TOKENS; ++t)
        for (int h = 0; h < KH; ++h)
            for (int j = 0; j < D / 2; ++j) {
                const size_t o = ((size_t)t * KH + (size_t)h) * D + (size_t)j;
                const double a0 = from_bf16(k[o]), b0 = from_bf16(k[o + D / 2]);
                const double a1 = from_bf16(k_rot[o]), b1 = from_bf16(k_rot[o + D / 2]);
                const double n0 = sqrt(a0 * a0 + b0 * b0), n1 = sqrt(a1 * a1 + b1 * b1);
                len_err = fmax(len_err, fabs(n1 - n0) / (n0 + 1e-30));
            }
    expect(len_err < 1.0 / 64, "every k pair keeps its length");

    /* in place: the outputs are the inputs */
    static uint16_t q2[TOKENS * QH * D], k2[TOKENS * KH * D];
    memcpy(q2, q, sizeof q);
    memcpy(k2, k, sizeof k);
    status = ropegen_llama3_8b(q2, QH * D, D, k2, KH * D, D, positions, q2, QH * D, D, k2, KH * D, D, TOKENS, 1);
    expect(status == ROPEGEN_OK && memcmp(q2, q_rot, sizeof q2) == 0 && memcmp(k2, k_rot, sizeof k2) == 0,
           "in place gives the same bits as out of place");

    /* a negative size is refused before anything is touched */
    status = ropegen_llama3_8b(q, QH * D, D, k, KH * D, D, positions, q_rot, QH * D, D, k_rot, KH * D, D, -1, 1);
    expect(status == ROPEGEN_EARG, "negative token count: ROPEGEN_EARG");

    printf("%s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
