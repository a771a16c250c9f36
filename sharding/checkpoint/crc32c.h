// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
// every stored piece of a checkpoint: the CPU's own instruction where it has
// one (x86's SSE 4.2 crc32, 8 bytes at a time), else a table-driven
// implementation, 8 bytes per step ("slicing-by-8", about 1.9 GB/s on one
// core). crc32c("123456789") is 0xE3069283 (the standard check value).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rtd::ckpt {

// Continues `crc` (0 to start) over `bytes`.
std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t crc = 0);
// The table-driven one, whatever the CPU (for tests of the two against each other).
std::uint32_t crc32c_tables(const void* data, std::size_t bytes, std::uint32_t crc = 0);
// Which one crc32c() runs: "sse4.2" or "tables".
const char* crc32c_kind();

}  // namespace rtd::ckpt
