// A checkpoint directory whose manifest.json and `latest` are the fuzzer's
// bytes (and whose one rank file is a few bytes): read_manifest must refuse
// what no checkpoint holds before anything is sized from it, and what it
// accepts must be readable piece by piece without reading out of bounds.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "rt_dist/error.h"
#include "sharding/checkpoint/manifest.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rtd;
  namespace fs = std::filesystem;
  static const fs::path dir =
      fs::temp_directory_path() / ("rtd_manifest_fuzz_" + std::to_string(getpid()));
  static const bool made = [] {
    fs::create_directories(dir);
    std::ofstream(dir / "rank_00000.bin", std::ios::binary) << std::string(4096, '\x5a');
    return true;
  }();
  (void)made;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto split = text.find('\n');
  std::ofstream(dir / ckpt::kManifestName, std::ios::binary | std::ios::trunc)
      << text.substr(split == std::string::npos ? 0 : split + 1);
  std::ofstream(dir / "latest", std::ios::binary | std::ios::trunc) << text.substr(0, split);
  ckpt::read_latest(dir.string());
  try {
    const proto::CheckpointManifest m = ckpt::read_manifest(dir.string());
    ckpt::PieceReader reader(dir.string(), m);
    std::vector<char> out;
    for (const auto& t : m.tensors()) {
      ckpt::element_count(t);
      for (const auto& p : t.pieces()) {
        const std::size_t bytes = p.count() * dtype_size(ckpt::dtype_from_name(t.dtype(), "fuzz"));
        if (bytes > (1u << 20)) continue;  // the check above bounds it; this bounds the test
        out.resize(bytes);
        try {
          reader.read(t, p, out.data());
        } catch (const Error&) {
        }
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
