// The safetensors format (a public, simple layout that PyTorch's, JAX's and
// Hugging Face's tools read): an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype ("F32", "BF16", ...), shape and byte range
// in the data that follows, and optional "__metadata__" strings; then the
// tensors' bytes, back to back. Written by our code, one tensor at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rt_dist/types.h"

namespace rtd::ckpt {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;
};

// Writes `path`: the header for `entries` (in this order), then for each
// entry fill(i, out) writes its bytes into `out` (sized for it). Throws
// rtd::Error naming the file.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(std::size_t, std::vector<char>&)>& fill);

}  // namespace rtd::ckpt
