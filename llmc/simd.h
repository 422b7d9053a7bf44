// The CPU's SIMD width as GCC vector types: VL floats per vector (16 with AVX-512, 8 with AVX, else 4).
// The matmul's micro-kernel and the FMA-peak benchmark are written with these, so the compiler
// emits the widest FMAs the -march allows.
#pragma once

#if defined(__AVX512F__)
#define VL 16
#elif defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
typedef float vfloat __attribute__((vector_size(VL * sizeof(float))));
typedef float vfloat_u __attribute__((vector_size(VL * sizeof(float)), aligned(4))); // unaligned access
