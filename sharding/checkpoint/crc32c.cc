// CRC-32C: x86's crc32 instruction where the CPU has SSE 4.2 (chosen once),
// else slicing-by-8 over eight 256-entry tables, built once.
#include "sharding/checkpoint/crc32c.h"

#include <array>
#include <cstring>
#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace rtd::ckpt {
namespace {

using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

Tables make_tables() {
  Tables t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[0][i] = c;
  }
  for (std::uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  }
  return t;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(const void* data, std::size_t bytes,
                                                             std::uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t c = ~crc;
  for (; bytes >= 8; bytes -= 8, p += 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; bytes > 0; --bytes, ++p) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}

bool have_sse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#else
bool have_sse42() { return false; }
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t crc) {
#if defined(__x86_64__)
  if (have_sse42()) return crc32c_sse42(data, bytes, crc);
#endif
  return crc32c_tables(data, bytes, crc);
}

const char* crc32c_kind() { return have_sse42() ? "sse4.2" : "tables"; }

std::uint32_t crc32c_tables(const void* data, std::size_t bytes, std::uint32_t crc) {
  static const Tables t = make_tables();
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (; bytes >= 8; bytes -= 8, p += 8) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian hosts
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; bytes > 0; --bytes, ++p) c = t[0][(c ^ *p) & 0xff] ^ (c >> 8);
  return ~c;
}

}  // namespace rtd::ckpt
