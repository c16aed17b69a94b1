#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
#define DP(i) a##i=_mm512_dpbusd_epi32(a##i,w,x);
#define MK(NAME, EXTRA) __attribute__((noinline)) double NAME(long iters){ \
  __m512i a0=_mm512_set1_epi32(0),a1=_mm512_set1_epi32(1),a2=_mm512_set1_epi32(2),a3=_mm512_set1_epi32(3),a4=_mm512_set1_epi32(4),a5=_mm512_set1_epi32(5),a6=_mm512_set1_epi32(6),a7=_mm512_set1_epi32(7),b0=a0,b1=a1; __m512 f0=_mm512_set1_ps(1),f1=_mm512_set1_ps(2);\
  __m512i w=_mm512_set1_epi8(3), x=_mm512_set1_epi8(5), s=_mm512_set1_epi32(7); __m512 sf=_mm512_set1_ps(1.0001f), sg=_mm512_set1_ps(0.9999f);\
  double t0=now();\
  for(long it=0;it<iters;it++){ __asm__ volatile("" : "+v"(w), "+v"(x), "+v"(s));\
    DP(0)DP(1)DP(2)DP(3)DP(4)DP(5)DP(6)DP(7) EXTRA }\
  double t=now()-t0; __asm__ volatile("" :: "v"(a0),"v"(a1),"v"(a2),"v"(a3),"v"(a4),"v"(a5),"v"(a6),"v"(a7),"v"(b0),"v"(b1),"v"(f0),"v"(f1)); return t; }
MK(m0, )
MK(m1, b0=_mm512_mullo_epi32(a0,s); b1=_mm512_mullo_epi32(a1,s); __asm__ volatile(""::"v"(b0),"v"(b1));)
MK(m2, f0=_mm512_fmadd_ps(f0,sf,sg); f1=_mm512_fmadd_ps(f1,sf,sg);)
MK(m3, f0=_mm512_cvtepi32_ps(a0); f1=_mm512_cvtepi32_ps(a1); __asm__ volatile(""::"v"(f0),"v"(f1));)
MK(m4, b0=_mm512_madd_epi16(a0,s); b1=_mm512_madd_epi16(a1,s); __asm__ volatile(""::"v"(b0),"v"(b1));)
MK(m5, b0=_mm512_srli_epi16(a0,2); b1=_mm512_srli_epi16(a1,2); __asm__ volatile(""::"v"(b0),"v"(b1));)
MK(m6, b0=_mm512_and_si512(a0,s); b1=_mm512_and_si512(a1,s); __asm__ volatile(""::"v"(b0),"v"(b1));)
MK(m7, f0=_mm512_fmadd_ps(f0,sf,sg); f1=_mm512_fmadd_ps(f1,sf,sg); b0=_mm512_mullo_epi32(a0,s); b1=_mm512_mullo_epi32(a1,s); __asm__ volatile(""::"v"(b0),"v"(b1));)
MK(m8, f0=_mm512_fmadd_ps(f0,sf,sg); f1=_mm512_fmadd_ps(f1,sf,sg); f0=_mm512_fmadd_ps(f0,sf,sg); f1=_mm512_fmadd_ps(f1,sf,sg);)
MK(m9, b0=_mm512_add_epi32(a0,s); b1=_mm512_add_epi32(a1,s); __asm__ volatile(""::"v"(b0),"v"(b1));)
MK(m10, b0=_mm512_set1_epi32((int)it); __asm__ volatile(""::"v"(b0)); b1=_mm512_set1_epi32((int)it*3); __asm__ volatile(""::"v"(b1));)
MK(m11, f0=_mm512_mul_ps(f0,sf); f1=_mm512_mul_ps(f1,sg);)
MK(m12, f0=_mm512_add_ps(f0,sf); f1=_mm512_add_ps(f1,sg);)
MK(m13, b0=_mm512_shuffle_epi8(a0,s); b1=_mm512_shuffle_epi8(a1,s); __asm__ volatile(""::"v"(b0),"v"(b1));)
int main(){ long it=20000000; double (*fs[])(long)={m0,m1,m2,m3,m4,m5,m6,m7,m8,m9,m10,m11,m12,m13};
 const char*nm[]={"8dp","+2mulld","+2fma","+2cvt","+2maddwd","+2shift","+2and","+2fma+2mulld","+4fma","+2add","+2bcast gpr","+2mul","+2addps","+2pshufb"};
  for(int m=0;m<14;m++){ fs[m](it/10); double t=fs[m](it); printf("%-14s %.3f ns/iter (%.2f dp/ns)\n",nm[m],t/it*1e9, 8*it/t/1e9);} }
