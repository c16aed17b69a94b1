#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#include <stdint.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static int32_t xs[64] __attribute__((aligned(64)));
#define INIT __m512i a0=_mm512_set1_epi32(0),a1=_mm512_set1_epi32(1),a2=_mm512_set1_epi32(2),a3=_mm512_set1_epi32(3),a4=_mm512_set1_epi32(4),a5=_mm512_set1_epi32(5),a6=_mm512_set1_epi32(6),a7=_mm512_set1_epi32(7); __m512i w=_mm512_set1_epi8(3); const int32_t *p=xs;
#define FIN __asm__ volatile("" :: "v"(a0),"v"(a1),"v"(a2),"v"(a3),"v"(a4),"v"(a5),"v"(a6),"v"(a7));
__attribute__((noinline)) double sep(long iters){ INIT double t0=now();
  for(long it=0;it<iters;it++){ __asm__ volatile("" : "+v"(w), "+r"(p));
#define D(i) a##i=_mm512_dpbusd_epi32(a##i,w,_mm512_set1_epi32(p[i]));
  D(0)D(1)D(2)D(3)D(4)D(5)D(6)D(7) }
  double t=now()-t0; FIN return t;}
__attribute__((noinline)) double emb(long iters){ INIT double t0=now();
  for(long it=0;it<iters;it++){ __asm__ volatile("" : "+v"(w), "+r"(p));
#define E(i) __asm__("vpdpbusd %c[o](%[p])%{1to16%}, %[w], %[a]" : [a]"+v"(a##i) : [w]"v"(w), [p]"r"(p), [o]"i"(4*i));
  E(0)E(1)E(2)E(3)E(4)E(5)E(6)E(7) }
  double t=now()-t0; FIN return t;}
__attribute__((noinline)) double reg(long iters){ INIT __m512i x=_mm512_set1_epi8(5); double t0=now();
  for(long it=0;it<iters;it++){ __asm__ volatile("" : "+v"(w), "+v"(x));
#define R(i) a##i=_mm512_dpbusd_epi32(a##i,w,x);
  R(0)R(1)R(2)R(3)R(4)R(5)R(6)R(7) }
  double t=now()-t0; FIN return t;}
int main(){ long it=20000000; double (*fs[])(long)={reg,sep,emb,reg,sep,emb}; const char*nm[]={"reg","sep bcast","embedded","reg","sep bcast","embedded"};
 for(int m=0;m<6;m++){ fs[m](it/10); double t=fs[m](it); printf("%-10s %.3f ns/iter (%.2f dp/ns)\n",nm[m],t/it*1e9, 8*it/t/1e9);} }
