#define _POSIX_C_SOURCE 200809L
/* RMSNorm [N, 4096] A/B harness: kernels k0 and k1 (the same prototype) alternated every rep, each
 * right after an untimed call of itself (in cache), min per kernel. ESZ 4: f32, 2: bf16.
 * usage: ./rms_ab N reps ; env IP (in place), OFF (bytes x and y start past a page), FIRST=1 (k1 first) */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#ifndef ESZ
#define ESZ 4
#endif
typedef int (*kfn)(const void *, const void *, void *, int64_t, int);
int k0(const void *, const void *, void *, int64_t, int);
int k1(const void *, const void *, void *, int64_t, int);
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char **argv){
  int64_t N = atoll(argv[1]); int reps = atoi(argv[2]);
  int ip = getenv("IP") != NULL; int off = getenv("OFF") ? atoi(getenv("OFF")) : 0;
  kfn ks[2] = {k0, k1}; if (getenv("FIRST")) { ks[0] = k1; ks[1] = k0; }
  size_t n = (size_t)N*4096;
  char *x = (char*)aligned_alloc(4096, n*ESZ+4096) + off, *y = (char*)aligned_alloc(4096, n*ESZ+4096) + off;
  char *w = aligned_alloc(64, 4096*ESZ);
  for (size_t i=0;i<n;i++) { if (ESZ == 4) ((float*)(void*)x)[i] = (float)((i*7919)%200) / 100.0f - 1.0f; else ((uint16_t*)(void*)x)[i] = (uint16_t)(0x3f80 + (i*7919)%200); }
  for (int i=0;i<4096;i++) { if (ESZ == 4) ((float*)(void*)w)[i] = 1.0f; else ((uint16_t*)(void*)w)[i] = 0x3f80; }
  double best[2]={1e9,1e9};
  for (int r=0;r<reps+1;r++) for (int i=0;i<2;i++) {
    ks[i](x,w,ip?x:y,N,1);
    double t0=now(); ks[i](x,w,ip?x:y,N,1); double t1=now();
    if (r && t1-t0<best[i]) best[i]=t1-t0;
  }
  int a = getenv("FIRST") ? 1 : 0;
  printf("N=%lld %s off=%d: k0 %.2f us  k1 %.2f us%s\n",(long long)N, ip?"inplace":"oop", off, best[a]*1e6, best[1-a]*1e6, a ? "  (k1 run first)" : "");
  return 0;
}
