/* RMSNorm [N, 4096] (bf16 or f32 elements, ESZ bytes), two builds of one kernel (k0: before, k1: after)
 * alternated in one process, in both orders, each from memory (a 256 MiB read first; HOT=1: right after
 * an untimed call of itself instead), over x / y on a 64-byte line or 16 bytes into one (as NumPy places
 * a large array). CASES=placement (the default): in place and out of place, x and y at the same offset;
 * CASES=split: x and y on a line, x off and y on one (the bench's rows: its outputs are the runtime's),
 * both off, and in place off a line. x is restored before each call. Prints min / median per case and
 * k1 / k0 medians. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
int k0(const void *x, const void *s, void *y, int64_t n, int th);
int k1(const void *x, const void *s, void *y, int64_t n, int th);
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static uint16_t bf(float f){uint32_t u;memcpy(&u,&f,4);return (uint16_t)((u+0x7fff+((u>>16)&1))>>16);}
static volatile uint64_t sink;
static void flush(const uint64_t *b, size_t n){uint64_t s=0;for(size_t i=0;i<n;i+=8)s+=b[i];sink=s;}
static int cmpd(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return x<y?-1:x>y;}
static void fill(char *p, size_t ne, int esz){srand(1);for(size_t i=0;i<ne;i++){float f=(float)((rand()/(double)RAND_MAX-0.5)*4);if(esz==2){uint16_t h=bf(f);memcpy(p+2*i,&h,2);}else memcpy(p+4*i,&f,4);}}
int main(int argc,char**argv){
  if(argc<3){fprintf(stderr,"usage: ESZ=2|4 %s N ROUNDS\n",argv[0]);return 2;}
  const int64_t N=atoll(argv[1]); const int R=atoi(argv[2]); const int esz=getenv("ESZ")?atoi(getenv("ESZ")):2; const int th=getenv("TH")?atoi(getenv("TH")):1;
  const size_t ne=(size_t)N*4096, nb=ne*esz;
  char *xb=aligned_alloc(4096,nb+4096),*yb=aligned_alloc(4096,nb+4096),*xp=malloc(nb),*s=aligned_alloc(64,4096*4);
  fill(xp,ne,esz); fill(s,4096,esz); memset(yb,0,nb+4096);
  const size_t fb=(256u<<20)/8; uint64_t *fl=malloc(fb*8); for(size_t i=0;i<fb;i++)fl[i]=i;
  const int split=getenv("CASES")&&!strcmp(getenv("CASES"),"split");
  static const char *nmp[4]={"in place +0 ","in place +16","out=     +0 ","out=     +16"}, *nms[4]={"x+0  y+0   ","x+16 y+0   ","x+16 y+16  ","in place16 "};
  static const int offp[4]={0,16,0,16}, yoffp[4]={0,16,0,16}, inplp[4]={1,1,0,0}, offs[4]={0,16,16,16}, yoffs[4]={0,0,16,16}, inpls[4]={0,0,0,1};
  enum{C=8}; const char *const *nm=split?nms:nmp; const int *off=split?offs:offp, *yoff=split?yoffs:yoffp, *inpl=split?inpls:inplp;
  double *t[C]; for(int j=0;j<C;j++)t[j]=malloc(sizeof(double)*R);
  for(int r=0;r<R;r++) for(int jj=0;jj<C;jj++){
    const int j=(r&1)?C-1-jj:jj, c=j/2, k=j%2;
    char *x=xb+off[c], *y=inpl[c]?x:yb+yoff[c];
    memcpy(x,xp,nb);
    if(getenv("HOT")){ if(k) k1(x,s,y,N,th); else k0(x,s,y,N,th); if(inpl[c]) memcpy(x,xp,nb); } else flush(fl,fb);
    const double a=now(); int st=k?k1(x,s,y,N,th):k0(x,s,y,N,th); t[j][r]=now()-a;
    if(st){fprintf(stderr,"status %d\n",st);return 1;}
  }
  for(int c=0;c<4;c++){double m[2];for(int k=0;k<2;k++){qsort(t[2*c+k],R,sizeof(double),cmpd);m[k]=t[2*c+k][R/2];}
    printf("esz=%d th=%d N=%lld %s  k0 min %7.2f med %7.2f ms | k1 min %7.2f med %7.2f ms | k1/k0 med %.3f\n",esz,th,(long long)N,nm[c],
      t[2*c][0]*1e3,m[0]*1e3,t[2*c+1][0]*1e3,m[1]*1e3,m[1]/m[0]);}
  return 0;}
