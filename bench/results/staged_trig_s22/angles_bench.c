/* Appended to a generated kernel's text up to its call arguments (angles.sh): times rg_angles, the
 * cos / sin columns of one position, over 20000 positions; prints the best of 30 rounds, ns a call. */
#include <time.h>
#include <stdio.h>
static double rg_now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static float cs[RG_NCOLS], sn[RG_NCOLS];
int main(void)
{
    double best = 1e9;
    volatile float sink = 0;
    for (int r = 0; r < 30; r++) {
        const double t0 = rg_now();
        for (int64_t p = 0; p < 20000; p++) {
            rg_angles(p, cs, sn);
            sink += cs[5];
            __asm__ volatile("" ::: "memory");
        }
        const double t1 = rg_now();
        if (t1 - t0 < best) best = t1 - t0;
    }
    printf("%.1f\n", best / 20000 * 1e9);
    return 0;
}
