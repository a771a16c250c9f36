// The manifest's JSON form and the checked reads of pieces.
#include "sharding/checkpoint/manifest.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <utility>

#include "rt_dist/error.h"
#include "sharding/checkpoint/crc32c.h"

namespace rtd::ckpt {
namespace {

const std::map<std::string, DType>& dtype_names() {
  static const std::map<std::string, DType> names = {
      {"float32", DType::kFloat32}, {"float64", DType::kFloat64},   {"int32", DType::kInt32},
      {"int64", DType::kInt64},     {"bfloat16", DType::kBFloat16}, {"float16", DType::kFloat16}};
  return names;
}

std::string hex(std::uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", v);
  return text;
}

// The sum a manifest carries: over its deterministic binary form, the sum's field 0.
std::uint32_t manifest_sum(proto::CheckpointManifest manifest) {
  manifest.set_crc32c(0);
  std::string bytes;
  google::protobuf::io::StringOutputStream raw(&bytes);
  {
    google::protobuf::io::CodedOutputStream out(&raw);
    out.SetSerializationDeterministic(true);
    manifest.SerializeToCodedStream(&out);
  }
  return crc32c(bytes.data(), bytes.size());
}

// No checkpoint this library writes is larger; far below what overflows.
constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 56;

// Throws naming what no checkpoint holds, before anything is sized from it.
void check_values(const proto::CheckpointManifest& m, const std::string& path) {
  auto bad = [&](const std::string& what) {
    throw Error(ErrorCategory::kConfig, "manifest " + path + " is invalid: " + what);
  };
  if (m.world_size() < 1 || m.world_size() > (1 << 24))
    bad("world_size " + std::to_string(m.world_size()));
  for (const auto& f : m.files()) {
    const std::string& n = f.name();
    if (n.empty() || n.size() > 255 || n == "." || n == ".." || n.find('/') != std::string::npos ||
        n.find('\0') != std::string::npos)
      bad("file name '" + n.substr(0, 64) + "' is not a plain file name");
    if (f.bytes() > kMaxBytes) bad("file " + n + " claims " + std::to_string(f.bytes()) + " bytes");
  }
  std::set<std::string> names;
  for (const auto& t : m.tensors()) {
    const std::string where = "tensor '" + t.name().substr(0, 64) + "'";
    if (!names.insert(t.name()).second) bad(where + " is listed twice");
    const std::uint64_t esize = dtype_size(dtype_from_name(t.dtype(), "manifest " + path));
    std::uint64_t elements = 1;
    for (std::int64_t d : t.shape()) {
      if (d < 0) bad(where + " has a negative dimension " + std::to_string(d));
      if (d != 0 && elements > kMaxBytes / esize / static_cast<std::uint64_t>(d))
        bad(where + "'s shape holds more elements than any checkpoint");
      elements *= static_cast<std::uint64_t>(d);
    }
    for (const auto& p : t.pieces()) {
      if (p.file() < 0 || p.file() >= m.files_size())
        bad(where + " has a piece in file " + std::to_string(p.file()) + ", which is not listed");
      if (p.first() > elements || p.count() > elements - p.first())
        bad(where + " has a piece [" + std::to_string(p.first()) + " + " +
            std::to_string(p.count()) + ") outside its " + std::to_string(elements) + " elements");
      const std::uint64_t bytes = p.count() * esize;
      const std::uint64_t file_bytes = m.files(p.file()).bytes();
      if (p.offset() > file_bytes || bytes > file_bytes - p.offset())
        bad(where + " has a piece at byte " + std::to_string(p.offset()) + " (" +
            std::to_string(bytes) + " bytes) past the end of its file (" +
            std::to_string(file_bytes) + " bytes)");
    }
  }
}

// dir as a step directory (a trailing slash dropped) when it is named
// step_<N>; empty otherwise.
std::filesystem::path step_directory(const std::string& dir) {
  std::filesystem::path p = std::filesystem::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const std::string base = p.filename().string();
  if (base.rfind("step_", 0) != 0 || base.size() == 5 ||
      base.find_first_not_of("0123456789", 5) != std::string::npos)
    return {};
  return p;
}

// What a series is: 16 lowercase hex digits.
bool is_series(const std::string& text) {
  return text.size() == 16 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The manifest of step_<S>/ is step S's: a directory renamed (or swapped
// with another) would otherwise resume as the step it is named for from
// another step's state. Directories not named step_<N> are not checked.
void check_step(const proto::CheckpointManifest& m, const std::string& dir,
                const std::string& path) {
  const std::filesystem::path step = step_directory(dir);
  if (step.empty()) return;
  const std::string base = step.filename().string();
  if (base != step_dir_name(m.step()))
    throw Error(ErrorCategory::kConfig,
                "manifest " + path + " is of step " + std::to_string(m.step()) +
                    ", but its directory is " + base +
                    ": the step directories were renamed or swapped; put them back under their "
                    "own names (the manifest's step is the truth)");
}

// The manifest of <dir>/step_<S>/ is of <dir>'s series: a step directory
// copied in from another job's checkpoints (two jobs' step_100 swapped)
// would otherwise resume as this job. Manifests or directories from before
// series were written are not checked.
void check_series(const proto::CheckpointManifest& m, const std::string& dir,
                  const std::string& path) {
  if (m.series().empty()) return;
  if (!is_series(m.series()))
    throw Error(ErrorCategory::kConfig, "manifest " + path + " has a malformed series ('" +
                                            m.series().substr(0, 32) +
                                            "'; 16 hex digits expected): the file was edited");
  const std::filesystem::path step = step_directory(dir);
  if (step.empty()) return;
  const std::filesystem::path parent = step.parent_path();
  if (!std::filesystem::exists(parent / kSeriesName)) return;
  const std::string series = read_series(parent.string());
  if (series != m.series())
    throw Error(ErrorCategory::kConfig,
                "manifest " + path + " was saved in another checkpoint directory (series " +
                    m.series() + "; " + parent.string() + " is series " + series +
                    "): a step directory was copied in from another job's checkpoints; load "
                    "it from the directory it was saved in, or copy that whole directory");
}

// A manifest no checkpoint comes near (a million tensors is about 200 MB of JSON).
constexpr std::size_t kMaxManifestBytes = std::size_t{1} << 30;

}  // namespace

std::string whole_tensor_refusal(const proto::CheckpointManifest& m,
                                 const proto::CheckpointTensor& tensor) {
  const std::string where = "tensor '" + tensor.name().substr(0, 64) + "'";
  const std::uint64_t bytes =
      element_count(tensor) * dtype_size(dtype_from_name(tensor.dtype(), where));
  std::uint64_t file_bytes = 0;
  for (const auto& f : m.files()) file_bytes += f.bytes();  // each below 2^56: no overflow
  if (bytes > file_bytes)
    return where + " holds " + std::to_string(bytes) + " bytes, more than all its files' " +
           std::to_string(file_bytes);
  // Ranks that hold the same elements may each have saved them: pieces may overlap.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;  // [first, end)
  for (const auto& p : tensor.pieces()) spans.emplace_back(p.first(), p.first() + p.count());
  std::sort(spans.begin(), spans.end());
  std::uint64_t covered = 0;
  for (const auto& [first, end] : spans) {
    if (first > covered) break;
    covered = std::max(covered, end);
  }
  const std::uint64_t elements = element_count(tensor);
  if (covered < elements)
    return where + " element " + std::to_string(covered) + " of " + std::to_string(elements) +
           " is in no piece";
  return "";
}

std::string step_dir_name(std::int64_t step) {
  char text[32];
  std::snprintf(text, sizeof(text), "step_%08lld", static_cast<long long>(step));
  return text;
}

std::string dtype_name(DType dtype) {
  for (const auto& [name, d] : dtype_names()) {
    if (d == dtype) return name;
  }
  return "unknown";
}

DType dtype_from_name(const std::string& name, const std::string& where) {
  auto it = dtype_names().find(name);
  if (it == dtype_names().end())
    throw Error(ErrorCategory::kConfig, where + ": unknown dtype '" + name + "'");
  return it->second;
}

std::size_t element_count(const proto::CheckpointTensor& tensor) {
  std::size_t n = 1;
  for (std::int64_t d : tensor.shape()) n *= static_cast<std::size_t>(d);
  return n;
}

std::string manifest_to_json(const proto::CheckpointManifest& manifest) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  proto::CheckpointManifest summed = manifest;
  summed.set_crc32c(manifest_sum(manifest));
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(summed, &json, options);
  if (!status.ok())
    throw Error(ErrorCategory::kInternal, "cannot write a manifest: " + status.ToString());
  return json;
}

proto::CheckpointManifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestName;
  std::string json;
  {
    FileReader reader(path);
    if (reader.size() > kMaxManifestBytes)
      throw Error(ErrorCategory::kConfig, "manifest " + path + " is " +
                                              std::to_string(reader.size()) +
                                              " bytes, more than any checkpoint's");
    json.resize(reader.size());
    reader.read(0, json.data(), json.size());
  }
  proto::CheckpointManifest manifest;
  auto status = google::protobuf::util::JsonStringToMessage(json, &manifest);
  if (!status.ok()) {
    // The parser's message quotes the text over several lines: one line here.
    std::string why;
    for (char c : std::string(status.message())) {
      const bool space = c == '\n' || c == '\r' || c == '\t' || c == ' ';
      if (!space)
        why += c;
      else if (!why.empty() && why.back() != ' ')
        why += ' ';
    }
    while (!why.empty() && why.back() == ' ') why.pop_back();
    throw Error(ErrorCategory::kConfig, "manifest " + path + " is malformed: " + why);
  }
  if (manifest.format_version() > kFormatVersion || manifest.format_version() < 1) {
    throw Error(ErrorCategory::kConfig, "manifest " + path + " has format version " +
                                            std::to_string(manifest.format_version()) +
                                            "; this build reads versions 1 to " +
                                            std::to_string(kFormatVersion) +
                                            " (a newer rt_dist wrote it)");
  }
  if (manifest.format_version() >= 2 && manifest.crc32c() != manifest_sum(manifest)) {
    throw Error(ErrorCategory::kConfig, "manifest " + path + " has CRC-32C " +
                                            hex(manifest_sum(manifest)) + ", it says " +
                                            hex(manifest.crc32c()) + ": the file is corrupted");
  }
  check_values(manifest, path);
  check_step(manifest, dir, path);
  check_series(manifest, dir, path);
  return manifest;
}

std::string read_series(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kSeriesName).string();
  if (!std::filesystem::exists(path)) return "";
  FileReader f(path);                 // never through a link
  constexpr std::size_t kBytes = 17;  // 16 hex digits and a newline
  std::string text(std::min(f.size(), kBytes + 1), '\0');
  f.read(0, text.data(), text.size());
  if (text.size() != kBytes || text.back() != '\n' || !is_series(text.substr(0, kBytes - 1)))
    throw Error(ErrorCategory::kConfig,
                "checkpoint series file " + path +
                    " is malformed (16 hex digits and a newline expected): it was edited or "
                    "corrupted; remove it, and the next save writes the newest step's series");
  text.pop_back();
  return text;
}

std::string new_series() {
  std::random_device random;
  char text[17];
  std::snprintf(text, sizeof(text), "%08x%08x", random(), random());
  return text;
}

std::string latest_text(std::int64_t step) {
  const std::string name = step_dir_name(step);
  return name + "\ncrc32c " + hex(crc32c(name.data(), name.size())) + "\n";
}

std::string read_latest(const std::string& dir) {
  std::string text;
  try {
    text = read_file(dir + "/latest");
  } catch (const std::exception&) {
    return "";
  }
  const auto newline = text.find('\n');
  const std::string name = text.substr(0, newline);
  if (newline == std::string::npos) return "";
  const std::string rest = text.substr(newline + 1);
  if (rest.empty() && name.rfind("step_", 0) == 0) return name;  // format 1 wrote no sum
  if (rest != "crc32c " + hex(crc32c(name.data(), name.size())) + "\n") return "";
  return name;
}

PieceReader::PieceReader(std::string dir, const proto::CheckpointManifest& manifest)
    : dir_(std::move(dir)), manifest_(manifest) {}

const FileReader& PieceReader::file(int index) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = files_.find(index);
  if (it != files_.end()) return *it->second;
  if (index < 0 || index >= manifest_.files_size())
    throw Error(ErrorCategory::kConfig, "manifest in " + dir_ + " names file " +
                                            std::to_string(index) + ", which it does not list");
  const auto& f = manifest_.files(index);
  auto reader = std::make_unique<FileReader>(dir_ + "/" + f.name());
  if (reader->size() < f.bytes()) {
    throw Error(ErrorCategory::kConfig, "file " + dir_ + "/" + f.name() +
                                            " is truncated: " + std::to_string(reader->size()) +
                                            " bytes, the manifest says " +
                                            std::to_string(f.bytes()));
  }
  return *files_.emplace(index, std::move(reader)).first->second;
}

void PieceReader::read(const proto::CheckpointTensor& tensor, const proto::CheckpointPiece& piece,
                       void* out, bool check) {
  const std::size_t bytes =
      piece.count() * dtype_size(dtype_from_name(tensor.dtype(), "tensor '" + tensor.name() + "'"));
  const FileReader& f = file(piece.file());
  f.read(piece.offset(), out, bytes);
  if (!check) return;
  const std::uint32_t sum = crc32c(out, bytes);
  if (sum != piece.crc32c()) {
    throw Error(ErrorCategory::kConfig,
                "file " + dir_ + "/" + manifest_.files(piece.file()).name() + ": tensor '" +
                    tensor.name() + "' elements [" + std::to_string(piece.first()) + ", " +
                    std::to_string(piece.first() + piece.count()) + ") at byte " +
                    std::to_string(piece.offset()) + " have CRC-32C " + hex(sum) +
                    ", the manifest says " + hex(piece.crc32c()) + ": the file is corrupted");
  }
}

}  // namespace rtd::ckpt
