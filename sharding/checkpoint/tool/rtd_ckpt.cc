// rtd-ckpt: list, verify and consolidate the checkpoints rtd::ckpt writes.
//   rtd-ckpt list DIR                      the committed checkpoints, newest first
//                                          (one whose manifest cannot be read: UNREADABLE, why)
//   rtd-ckpt verify DIR[/step_N]           every piece's CRC-32C, every tensor whole
//   rtd-ckpt consolidate DIR[/step_N] OUT  one safetensors file of full tensors
// DIR alone means its latest checkpoint. Exit status: 0 fine, 1 a bad
// checkpoint (the message names the file and the tensor), 2 bad usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "rt_dist/checkpoint.h"
#include "rt_dist/error.h"
#include "sharding/checkpoint/manifest.h"
#include "sharding/checkpoint/safetensors.h"

namespace fs = std::filesystem;
using namespace rtd::ckpt;

namespace {

// A checkpoint's directory: itself, or the latest in a directory of them.
std::string resolve(const std::string& path) {
  if (fs::exists(fs::path(path) / kManifestName)) return path;
  const auto steps = list_checkpoints(path);
  if (steps.empty())
    throw rtd::Error(rtd::ErrorCategory::kConfig, path + " holds no committed checkpoint");
  return (fs::path(path) / step_dir_name(steps.front())).string();
}

// The whole of `tensor` into out, every piece read and checked; throws
// naming the elements that no piece holds, before allocating anything.
void assemble(PieceReader& reader, const rtd::proto::CheckpointTensor& tensor,
              const rtd::proto::CheckpointManifest& manifest, const std::string& dir,
              std::vector<char>& out) {
  if (const std::string why = whole_tensor_refusal(manifest, tensor); !why.empty())
    throw rtd::Error(rtd::ErrorCategory::kConfig, dir + "/" + kManifestName + ": " + why);
  const std::size_t esize = rtd::dtype_size(dtype_from_name(tensor.dtype(), dir));
  const std::size_t n = element_count(tensor);
  out.assign(n * esize, 0);
  std::vector<bool> seen(n, false);
  std::vector<char> piece;
  for (const auto& p : tensor.pieces()) {
    if (p.first() + p.count() > n)
      throw rtd::Error(rtd::ErrorCategory::kConfig,
                       dir + ": a piece of tensor '" + tensor.name() + "' lies outside it");
    piece.resize(p.count() * esize);
    reader.read(tensor, p, piece.data());
    std::copy(piece.begin(), piece.end(), out.begin() + p.first() * esize);
    std::fill(seen.begin() + p.first(), seen.begin() + p.first() + p.count(), true);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!seen[i])
      throw rtd::Error(rtd::ErrorCategory::kConfig, dir + ": tensor '" + tensor.name() +
                                                        "' element " + std::to_string(i) +
                                                        " is in no piece");
  }
}

int list(const std::string& dir) {
  const std::string latest = read_latest(dir);
  std::printf("%-16s %6s %8s %14s\n", "checkpoint", "ranks", "tensors", "bytes");
  int bad = 0;
  for (auto step : list_checkpoints(dir)) {
    const std::string name = step_dir_name(step);
    const char* mark = name == latest ? "  (latest)" : "";
    try {
      const auto m = read_manifest(dir + "/" + name);
      std::size_t bytes = 0;
      for (const auto& f : m.files()) bytes += f.bytes();
      std::printf("%-16s %6d %8d %14zu%s\n", name.c_str(), m.world_size(), m.tensors_size(), bytes,
                  mark);
    } catch (const rtd::Error& e) {  // listed, with why it cannot be loaded
      ++bad;
      std::printf("%-16s %6s %8s %14s%s  UNREADABLE: %s\n", name.c_str(), "-", "-", "-", mark,
                  e.what());
    }
  }
  return bad > 0 ? 1 : 0;
}

int verify(const std::string& path) {
  const std::string dir = resolve(path);
  const auto m = read_manifest(dir);
  PieceReader reader(dir, m);
  std::vector<char> data;
  std::size_t bytes = 0;
  for (const auto& t : m.tensors()) {
    assemble(reader, t, m, dir, data);
    bytes += data.size();
  }
  std::printf("%s: step %lld, %d tensors, %zu bytes, every checksum matches\n", dir.c_str(),
              static_cast<long long>(m.step()), m.tensors_size(), bytes);
  return 0;
}

int consolidate(const std::string& path, const std::string& out) {
  const std::string dir = resolve(path);
  const auto m = read_manifest(dir);
  PieceReader reader(dir, m);
  std::vector<SafetensorsEntry> entries;
  for (const auto& t : m.tensors())
    entries.push_back(
        {t.name(), dtype_from_name(t.dtype(), dir), {t.shape().begin(), t.shape().end()}});
  std::map<std::string, std::string> meta(m.meta().begin(), m.meta().end());
  meta["step"] = std::to_string(m.step());
  write_safetensors(out, entries, meta, [&](std::size_t i, std::vector<char>& data) {
    assemble(reader, m.tensors(static_cast<int>(i)), m, dir, data);
  });
  std::printf("%s: %d tensors of step %lld written to %s\n", dir.c_str(), m.tensors_size(),
              static_cast<long long>(m.step()), out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rtd-ckpt: list, verify and consolidate rt_dist checkpoints", "rtd-ckpt"};
  app.require_subcommand(1);
  std::string dir, out;
  auto* list_cmd = app.add_subcommand("list", "the committed checkpoints in DIR, newest first");
  list_cmd->add_option("dir", dir, "the checkpoint directory")->required();
  auto* verify_cmd =
      app.add_subcommand("verify", "check every piece's CRC-32C and that every tensor is whole");
  verify_cmd->add_option("dir", dir, "a checkpoint, or a directory of them (its latest)")
      ->required();
  auto* cons_cmd =
      app.add_subcommand("consolidate", "write one safetensors file of the full tensors");
  cons_cmd->add_option("dir", dir, "a checkpoint, or a directory of them (its latest)")->required();
  cons_cmd->add_option("out", out, "the .safetensors file to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*list_cmd) return list(dir);
    if (*verify_cmd) return verify(dir);
    return consolidate(dir, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rtd-ckpt: %s\n", e.what());
    return 1;
  }
}
