// The AVX-512 AdamW kernel (16 floats a step), compiled for AVX-512F alone
// (CMake gives this file that flag, and no contraction into fused
// multiply-adds): the scalar loop's operations in its order, so its bits.
#include <immintrin.h>

#include <cstdint>

#include "sharding/cpu_adamw.h"

namespace rtd::shard::cpu {
namespace {

__m512 load16(const BufferView& b, std::size_t j) {
  if (b.dtype == DType::kFloat32) return _mm512_loadu_ps(static_cast<const float*>(b.data) + j);
  const __m256i half = _mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(b.data) + j));
  if (b.dtype == DType::kFloat16) return _mm512_cvtph_ps(half);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// float_to_bf16's rounding (to nearest, ties to even; NaN kept quiet), 16 at a time.
__m256i to_bf16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

void store16(const BufferView& b, std::size_t j, __m512 x) {
  if (b.dtype == DType::kFloat32) return _mm512_storeu_ps(static_cast<float*>(b.data) + j, x);
  auto* dst = reinterpret_cast<__m256i*>(static_cast<std::uint16_t*>(b.data) + j);
  if (b.dtype == DType::kFloat16)
    _mm256_storeu_si256(dst, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else
    _mm256_storeu_si256(dst, to_bf16(x));
}

}  // namespace

bool adamw_avx512(const AdamWShard& s, const AdamWConstants& k, std::size_t begin,
                  std::size_t end) {
  const AdamWOptions& o = s.options;
  const __m512 scale = _mm512_set1_ps(s.grad_scale), b1 = _mm512_set1_ps(o.beta1),
               c1 = _mm512_set1_ps(1.0f - o.beta1), b2 = _mm512_set1_ps(o.beta2),
               c2 = _mm512_set1_ps(1.0f - o.beta2), decay = _mm512_set1_ps(k.decay),
               lr = _mm512_set1_ps(o.lr), bc1 = _mm512_set1_ps(k.bc1), bc2 = _mm512_set1_ps(k.bc2),
               eps = _mm512_set1_ps(o.eps);
  auto* p = static_cast<float*>(s.param.data);
  std::size_t j = begin;
  for (; j + 16 <= end; j += 16) {
    const __m512 g = _mm512_mul_ps(load16(s.grad, j), scale);
    const __m512 m =
        _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(s.m + j)), _mm512_mul_ps(c1, g));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(s.v + j)),
                                   _mm512_mul_ps(_mm512_mul_ps(c2, g), g));
    const __m512 step = _mm512_div_ps(_mm512_mul_ps(lr, _mm512_div_ps(m, bc1)),
                                      _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(v, bc2)), eps));
    const __m512 x = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(p + j), decay), step);
    _mm512_storeu_ps(s.m + j, m);
    _mm512_storeu_ps(s.v + j, v);
    _mm512_storeu_ps(p + j, x);
    if (s.out.data) store16(s.out, j, x);
  }
  // The tail through the AVX2 kernel (its own scalar tail after it): the same bits.
  if (j < end && !adamw_avx2(s, k, j, end)) adamw_scalar(s, k, j, end);
  return true;
}

}  // namespace rtd::shard::cpu
