// A data shard whose bytes are the fuzzer's: ShardFile must refuse any
// header that does not describe the file exactly, and every record of one
// it accepts must lie inside the file.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/shard_file.h"
#include "rt_dist/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rtd;
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("rtd_shard_fuzz_" + std::to_string(getpid())))
          .string();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  for (std::size_t record_bytes : {std::size_t{1}, std::size_t{2}, std::size_t{16}}) {
    try {
      data::ShardFile shard(path, record_bytes);
      volatile unsigned char sum = 0;
      for (std::uint64_t i = 0; i < shard.records(); ++i)
        for (std::size_t b = 0; b < record_bytes; ++b) sum = sum + shard.record(i)[b];
    } catch (const Error&) {
    }
  }
  return 0;
}
