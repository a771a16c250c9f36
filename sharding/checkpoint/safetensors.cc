// A safetensors writer: the JSON header by hand (names and metadata escaped),
// padded with spaces to 8 bytes, then the data.
#include "sharding/checkpoint/safetensors.h"

#include <filesystem>

#include "rt_dist/error.h"
#include "runtime/core/json_quote.h"
#include "sharding/checkpoint/files.h"

namespace rtd::ckpt {
namespace {

std::string dtype_code(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat64:
      return "F64";
    case DType::kInt32:
      return "I32";
    case DType::kInt64:
      return "I64";
    case DType::kBFloat16:
      return "BF16";
    case DType::kFloat16:
      return "F16";
  }
  return "?";
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata,
                       const std::function<void(std::size_t, std::vector<char>&)>& fill) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + json_quote(k) + ":" + json_quote(v);
      first = false;
    }
    header += "}";
  }
  std::vector<std::size_t> bytes;
  std::size_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    std::size_t n = dtype_size(e.dtype);
    std::string shape;
    for (std::int64_t d : e.shape) {
      n *= static_cast<std::size_t>(d);
      shape += (shape.empty() ? "" : ",") + std::to_string(d);
    }
    bytes.push_back(n);
    header += (header.size() > 1 ? "," : "") + json_quote(e.name) + ":{\"dtype\":\"" +
              dtype_code(e.dtype) + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(offset + n) + "]}";
    offset += n;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  // Written beside and renamed into place: `path` is the whole file or what was there before.
  const std::string tmp = path + ".tmp";
  try {
    FileWriter w(tmp);
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
    w.write(length, 8);
    w.write(header.data(), header.size());
    std::vector<char> data;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      data.assign(bytes[i], 0);
      fill(i, data);
      if (data.size() != bytes[i])
        throw Error(ErrorCategory::kInternal,
                    "safetensors: tensor '" + entries[i].name + "' came back with the wrong size");
      w.write(data.data(), data.size());
    }
    w.close();
    std::filesystem::rename(tmp, path);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  const std::string parent = std::filesystem::path(path).parent_path().string();
  fsync_dir(parent.empty() ? "." : parent);
}

}  // namespace rtd::ckpt
