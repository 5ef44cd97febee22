#define _POSIX_C_SOURCE 200809L
/* RoPE A/B harness (llama3 q + k, the bench suite's llama3_8b_<dt>): kernels k0..k(NK-1), the same prototype, alternated every rep, min per kernel.
   usage: ./rope_ab T reps ; env HOT (each timed call right after an untimed one, else after reading 256 MiB), IP (in place), OFF (bytes q, k and outputs start past a page), OOFF (outputs alone) */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#ifndef ESZ
#define ESZ 2
#endif
typedef int (*kfn)(const void *, int64_t, int64_t, const void *, int64_t, int64_t, const int64_t *, void *, int64_t, int64_t, void *, int64_t, int64_t, int64_t, int);
#define P(n) int n(const void *, int64_t, int64_t, const void *, int64_t, int64_t, const int64_t *, void *, int64_t, int64_t, void *, int64_t, int64_t, int64_t, int);
P(k0) P(k1)
#if NK > 2
P(k2)
#endif
#if NK > 3
P(k3)
#endif
static kfn ks[] = {k0, k1,
#if NK > 2
k2,
#endif
#if NK > 3
k3,
#endif
};
static void yard(char *q, size_t nq, char *k, size_t nk)
{
    uint64_t *a = (uint64_t *)(void *)q, *b = (uint64_t *)(void *)k;
    for (size_t i = 0; i < nq / 8; ++i) a[i] ^= 0x0001000100010001ull;
    for (size_t i = 0; i < nk / 8; ++i) b[i] ^= 0x0001000100010001ull;
}
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char **argv){
  int64_t T = argc>1? atoll(argv[1]) : 4096; int reps = argc>2? atoi(argv[2]) : 10;
  int hot = getenv("HOT") != NULL, ip = getenv("IP") != NULL; int th = getenv("TH") ? atoi(getenv("TH")) : 1;
  int off = getenv("OFF") ? atoi(getenv("OFF")) : 0, ooff = getenv("OOFF") ? atoi(getenv("OOFF")) : off;
  size_t nq = (size_t)T*32*128, nk = (size_t)T*8*128;
  char *q = (char*)aligned_alloc(4096, nq*ESZ+4096) + off, *k = (char*)aligned_alloc(4096, nk*ESZ+4096) + off;
  char *qo = (char*)aligned_alloc(4096, nq*ESZ+4096) + ooff, *ko = (char*)aligned_alloc(4096, nk*ESZ+4096) + ooff;
  int64_t *pos = malloc(T*8);
  for (size_t i=0;i<nq*ESZ/2;i++) ((uint16_t*)q)[i] = ESZ==4 ? (i&1 ? 0x3f80 + (i*7919)%200 : 0) : 0x3f80 + (i*7919)%200;
  for (size_t i=0;i<nk*ESZ/2;i++) ((uint16_t*)k)[i] = ESZ==4 ? (i&1 ? 0x3f80 + (i*7919)%200 : 0) : 0x3f80 + (i*7919)%200;
  memset(qo,0,nq*ESZ); memset(ko,0,nk*ESZ);
  for (int64_t t=0;t<T;t++) pos[t]=t;
  size_t fl = 256u<<20; char *f = malloc(fl); memset(f,1,fl);
  double best[NK]; for (int i=0;i<NK;i++) best[i]=1e9; volatile long sink=0;
  for (int r=0;r<reps+1;r++) for (int i=0;i<NK;i++) {
    if (!hot){ long s=0; for (size_t j=0;j<fl;j+=64) s+=f[j]; sink+=s; } else { if (ip) ks[i](q,4096,128,k,1024,128,pos,q,4096,128,k,1024,128,T,th); else ks[i](q,4096,128,k,1024,128,pos,qo,4096,128,ko,1024,128,T,th); }
    double t0=now();
    int st = ip ? ks[i](q,4096,128,k,1024,128,pos,q,4096,128,k,1024,128,T,th) : ks[i](q,4096,128,k,1024,128,pos,qo,4096,128,ko,1024,128,T,th);
    double t1=now(); if (st) {printf("status %d\n",st); return 1;}
    if (r && t1-t0<best[i]) best[i]=t1-t0;
  }
  double yb = 1e9;
  if (ip) for (int r=0;r<reps+1;r++) {
    if (!hot){ long s=0; for (size_t j=0;j<fl;j+=64) s+=f[j]; sink+=s; } else yard(q, nq*ESZ, k, nk*ESZ);
    double t0=now(); yard(q, nq*ESZ, k, nk*ESZ); double t1=now(); if (r && t1-t0<yb) yb=t1-t0;
  }
  printf("T=%lld th=%d %s %s off=%d/%d:", (long long)T, th, hot?"hot":"cold", ip?"inplace":"oop", off, ooff);
  if (ip) printf("  yard %.1f ns/tok", yb*1e9/T);
  for (int i=0;i<NK;i++) printf("  k%d %.1f ns/tok", i, best[i]*1e9/T);
  printf("\n"); return 0;}
