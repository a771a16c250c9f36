// Shard files: writing, mapping, and the checks that name a bad file.
#include "data/shard_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "rt_dist/data.h"
#include "rt_dist/error.h"

namespace rtd::data {
namespace {

constexpr char kMagic[8] = {'R', 'T', 'D', 'D', 'A', 'T', 'A', '1'};

void put(unsigned char* at, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<unsigned char>(value >> (8 * i));
}
std::uint64_t get(const unsigned char* at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(at[i]) << (8 * i);
  return v;
}
[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw Error(ErrorCategory::kConfig, "data file " + path + ": " + why);
}

}  // namespace

void write_shard(const std::string& path, std::size_t record_bytes, std::uint64_t records,
                 const std::function<void(std::uint64_t, unsigned char*)>& fill) {
  if (record_bytes == 0) bad(path, "records of 0 bytes");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) bad(path, std::string("cannot create it: ") + std::strerror(errno));
  unsigned char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  put(header + 8, 1, 4);
  put(header + 12, record_bytes, 4);
  put(header + 16, records, 8);
  bool ok = std::fwrite(header, 1, kHeaderBytes, f) == kHeaderBytes;
  std::vector<unsigned char> record(record_bytes);
  for (std::uint64_t i = 0; ok && i < records; ++i) {
    fill(i, record.data());
    ok = std::fwrite(record.data(), 1, record_bytes, f) == record_bytes;
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok) bad(path, "cannot write it");
}

ShardFile::ShardFile(const std::string& path, std::size_t record_bytes)
    : record_bytes_(record_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad(path, std::string("cannot open it: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    bad(path, "cannot stat it");
  }
  const std::size_t size = static_cast<std::size_t>(st.st_size);
  if (size < kHeaderBytes) {
    ::close(fd);
    bad(path, "holds " + std::to_string(size) + " bytes, less than a header (" +
                  std::to_string(kHeaderBytes) + ")");
  }
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) bad(path, std::string("cannot map it: ") + std::strerror(errno));
  base_ = static_cast<const unsigned char*>(base);
  mapped_ = size;
  auto unmap = [&] {
    ::munmap(base, size);
    base_ = nullptr;
  };
  if (std::memcmp(base_, kMagic, 8) != 0) {
    unmap();
    bad(path, "not a data shard (no RTDDATA1 header); write shards with rtd::data::write_shard");
  }
  const std::uint64_t version = get(base_ + 8, 4), bytes = get(base_ + 12, 4);
  records_ = get(base_ + 16, 8);
  std::string why;
  if (version != 1) {
    why = "format version " + std::to_string(version) + "; this build reads version 1";
  } else if (bytes != record_bytes || record_bytes == 0) {
    why = "records of " + std::to_string(bytes) + " bytes, the loader expects " +
          std::to_string(record_bytes);
  } else if (records_ > (size - kHeaderBytes) / record_bytes) {
    // Compared by division: a count whose product with the record size
    // wraps around would otherwise pass for the file's size.
    why = "holds " + std::to_string(size) + " bytes, but its header says " +
          std::to_string(records_) + " records of " + std::to_string(bytes) +
          " bytes: the file is short (truncated?)";
  } else if (size != kHeaderBytes + records_ * record_bytes) {
    why = "holds " + std::to_string(size) + " bytes, but its header says " +
          std::to_string(records_) + " records of " + std::to_string(bytes) + " bytes (" +
          std::to_string(kHeaderBytes + records_ * record_bytes) + "): " +
          (size < kHeaderBytes + records_ * record_bytes ? "the file is short (truncated?)"
                                                         : "the file is longer than its records");
  }
  if (!why.empty()) {
    unmap();
    bad(path, why);
  }
}

ShardFile::~ShardFile() {
  if (base_) ::munmap(const_cast<unsigned char*>(base_), mapped_);
  base_ = nullptr;
}

}  // namespace rtd::data
