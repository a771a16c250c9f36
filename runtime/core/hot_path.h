// RTD_HOT marks the functions that every small collective runs through on
// the host. The compiler places them together (a section of their own), so
// that the path touches a few lines and pages of code: NCCL's own call, in
// between, pushes ours out of the caches, and each line it needs again is a
// miss. Each starts on a cache line, so that a function of n lines' worth
// of code touches n lines, not n + 1. RTD_COLD marks what runs only on
// failure (naming an error), kept out of the way of the path. RTD_INLINE
// makes a helper of the path part of each caller (defined in the same file,
// before them): one stretch of code, not a call to a line elsewhere.
// RTD_NOINLINE keeps a branch the path takes only sometimes (a large call's
// events, a group) out of that stretch, without calling it cold.
#pragma once

#if (defined(__GNUC__) || defined(__clang__)) && !defined(RTD_AB_WITHOUT_HOT)
#define RTD_HOT __attribute__((hot, aligned(64)))
#define RTD_COLD __attribute__((cold, noinline))
#define RTD_INLINE __attribute__((always_inline)) inline
#define RTD_NOINLINE __attribute__((noinline))
#else
#define RTD_HOT
#define RTD_COLD
#define RTD_INLINE inline
#define RTD_NOINLINE
#endif
