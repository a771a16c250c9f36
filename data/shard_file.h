// One shard file of fixed-size records, memory-mapped and checked: the
// header is "RTDDATA1", a version (1), the record size and the record count
// (little-endian), padded to 64 bytes; the file's size must be exactly the
// header plus the records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rtd::data {

inline constexpr std::size_t kHeaderBytes = 64;

class ShardFile {
 public:
  ShardFile(const std::string& path, std::size_t record_bytes);
  ~ShardFile();
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;
  std::uint64_t records() const { return records_; }
  const unsigned char* record(std::uint64_t i) const {
    return base_ + kHeaderBytes + i * record_bytes_;
  }

 private:
  std::size_t record_bytes_;
  std::uint64_t records_ = 0;
  const unsigned char* base_ = nullptr;
  std::size_t mapped_ = 0;
};

}  // namespace rtd::data
