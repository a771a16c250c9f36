// The MLP's inputs from shard files through rtd::data's loader: a record is
// one token's input, `hidden` bfloat16 values. make_inputs writes synthetic
// ones (uniform, variance 1, as the model's fixed input); open_inputs opens a
// directory of them for this rank, handing batches out on its GPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "rt_dist/rt_dist.h"

namespace mlp {

// Round-to-nearest-even float -> bfloat16 bits.
inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

inline void make_inputs(const std::string& dir, long long records, int hidden) {
  std::filesystem::create_directories(dir);
  const long long per_file = (records + 3) / 4;
  for (int file = 0; file < 4; ++file) {
    const long long first = per_file * file;
    const long long n = std::max(0LL, std::min(per_file, records - first));
    rtd::data::write_shard(
        dir + "/shard_" + std::to_string(file) + ".bin", 2u * hidden, static_cast<std::uint64_t>(n),
        [&](std::uint64_t i, unsigned char* out) {
          std::uint64_t z = (first + i) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
          for (int c = 0; c < hidden; ++c) {
            z ^= z >> 31;
            z *= 0xBF58476D1CE4E5B9ull;
            z ^= z >> 29;
            const float u = static_cast<float>(z >> 40) / static_cast<float>(1 << 24);
            const std::uint16_t v = to_bf16((2.0f * u - 1.0f) * 1.7320508f);
            std::memcpy(out + 2 * c, &v, 2);
          }
        });
  }
}

inline std::unique_ptr<rtd::data::Loader> open_inputs(const std::string& dir, int hidden, int batch,
                                                      rtd::Context& ctx) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".bin") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return std::make_unique<rtd::data::Loader>(
      rtd::data::LoaderOptions{.files = files,
                               .record_bytes = 2u * static_cast<std::size_t>(hidden),
                               .batch_per_rank = batch,
                               .rank = ctx.rank(),
                               .world_size = ctx.world_size(),
                               .seed = 3,
                               .device_index = ctx.local_rank()});
}

}  // namespace mlp
