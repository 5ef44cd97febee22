/* The AVX2 fused RMSNorm bf16 loop of rmsnorm.c.j2, reduced to the next row's sum and one step of 16 values:
 * k_split rounds by Veltkamp's split (rg_vsplit_bf16_avx2), k_carry by the carry form it replaced. For
 * llvm-mca only (command.sh): it is not run. */
#include <immintrin.h>
#include <stdint.h>
#define N 4096
static inline __m256 split(__m256 v){ const __m256 c = v * _mm256_set1_ps(65537.0f); return c - (c - v); }
static inline __m256i rne(__m256 v){ __m256i u=_mm256_castps_si256(v); return _mm256_add_epi32(_mm256_add_epi32(u,_mm256_set1_epi32(0x7fff)),_mm256_and_si256(_mm256_srli_epi32(u,16),_mm256_set1_epi32(1))); }
static inline __m256 grid(__m256 v){ return _mm256_castsi256_ps(_mm256_and_si256(rne(v),_mm256_set1_epi32((int)0xffff0000u))); }
__attribute__((target("avx2")))
float k_split(uint16_t *y, const uint16_t *x, const uint16_t *xn, const float *w, float inv_)
{
  const __m256 inv=_mm256_set1_ps(inv_); const __m256i m=_mm256_set1_epi32((int)0xffff0000u);
  __m256 a0=_mm256_setzero_ps(),a1=a0;
  for (int i=0;i<N;i+=16){
    __m256i v=_mm256_loadu_si256((const __m256i*)(xn+i));
    __m256 e=_mm256_castsi256_ps(_mm256_slli_epi32(v,16)), o=_mm256_castsi256_ps(_mm256_and_si256(v,m));
    a0+=e*e; a1+=o*o;

    __m256i u=_mm256_loadu_si256((const __m256i*)(x+i));
    __m256 xe=_mm256_castsi256_ps(_mm256_slli_epi32(u,16)), xo=_mm256_castsi256_ps(_mm256_and_si256(u,m));
    __m256 ye=split(split(xe*inv)*_mm256_loadu_ps(w+i)), yo=split(split(xo*inv)*_mm256_loadu_ps(w+i+8));
    _mm256_stream_si256((__m256i*)(y+i),_mm256_or_si256(_mm256_castps_si256(yo),_mm256_srli_epi32(_mm256_castps_si256(ye),16)));
  }
  return a0[0]+a1[0];
}
__attribute__((target("avx2")))
float k_carry(uint16_t *y, const uint16_t *x, const uint16_t *xn, const float *w, float inv_)
{
  const __m256 inv=_mm256_set1_ps(inv_); const __m256i m=_mm256_set1_epi32((int)0xffff0000u);
  __m256 a0=_mm256_setzero_ps(),a1=a0;
  for (int i=0;i<N;i+=16){
    __m256i v=_mm256_loadu_si256((const __m256i*)(xn+i));
    __m256 e=_mm256_castsi256_ps(_mm256_slli_epi32(v,16)), o=_mm256_castsi256_ps(_mm256_and_si256(v,m));
    a0+=e*e; a1+=o*o;
    __m256i u=_mm256_loadu_si256((const __m256i*)(x+i));
    __m256 xe=_mm256_castsi256_ps(_mm256_slli_epi32(u,16)), xo=_mm256_castsi256_ps(_mm256_and_si256(u,m));
    __m256i we=rne(grid(xe*inv)*_mm256_loadu_ps(w+i)), wo=rne(grid(xo*inv)*_mm256_loadu_ps(w+i+8));
    _mm256_stream_si256((__m256i*)(y+i),_mm256_or_si256(_mm256_and_si256(wo,m),_mm256_srli_epi32(we,16)));
  }
  return a0[0]+a1[0];
}
