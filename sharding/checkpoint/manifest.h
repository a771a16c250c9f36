// A checkpoint's manifest (proto/checkpoint.proto) as JSON on disk, and the
// reads that check what they read: the format version, every piece's CRC-32C.
// Shared by the Checkpointer and the rtd-ckpt tool.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint.pb.h"
#include "rt_dist/types.h"
#include "sharding/checkpoint/files.h"

namespace rtd::ckpt {

inline constexpr int kFormatVersion = 2;
inline constexpr const char* kManifestName = "manifest.json";
// The file holding a checkpoint directory's series: 16 hex digits, made at
// the directory's first save and written into every manifest saved there.
inline constexpr const char* kSeriesName = "series";

std::string step_dir_name(std::int64_t step);  // "step_00000100"
std::string dtype_name(DType dtype);
DType dtype_from_name(const std::string& name, const std::string& where);
std::size_t element_count(const proto::CheckpointTensor& tensor);

// The JSON, with the manifest's CRC-32C in it.
std::string manifest_to_json(const proto::CheckpointManifest& manifest);
// Throws rtd::Error naming `dir` when the manifest is missing, malformed,
// fails its CRC-32C, is from a newer format version, or holds values no
// checkpoint has (negative or overflowing sizes, pieces outside their tensor
// or file, file names that leave the directory, a tensor named twice), or
// is of another step than its directory step_<S> is named for, or of
// another series than the directory holding step_<S> (a step copied in from
// another job's checkpoints): checked before anything is allocated from it.
proto::CheckpointManifest read_manifest(const std::string& dir);

// The series of checkpoint directory `dir` (its `series` file); empty when it
// has none (saved before series were written). Throws naming the file when
// it is malformed.
std::string read_series(const std::string& dir);
// A new series: 16 random hex digits.
std::string new_series();

// Why `tensor` cannot be assembled whole from the manifest's pieces (empty:
// it can), checked before its memory is allocated: larger than all the
// files together, or elements in no piece. A checkpoint may hold tensors
// that no rank saved whole; a load fills only the ranges asked for.
std::string whole_tensor_refusal(const proto::CheckpointManifest& manifest,
                                 const proto::CheckpointTensor& tensor);

// The `latest` file: the step's directory name, then its CRC-32C.
std::string latest_text(std::int64_t step);
// The directory name `latest` in dir names; empty when it is missing or fails its CRC-32C.
std::string read_latest(const std::string& dir);

// Reads a checkpoint's pieces, each file opened once and checked against its
// size in the manifest; read() may be called from several threads at once.
class PieceReader {
 public:
  PieceReader(std::string dir, const proto::CheckpointManifest& manifest);
  // The piece's bytes into out (count * dtype size of `tensor`), its CRC-32C
  // checked (unless `check` is false: it was, a moment ago): a mismatch names
  // the file, the tensor, the elements and both sums.
  void read(const proto::CheckpointTensor& tensor, const proto::CheckpointPiece& piece, void* out,
            bool check = true);

 private:
  const FileReader& file(int index);

  std::string dir_;
  const proto::CheckpointManifest& manifest_;
  std::mutex mutex_;  // guards files_
  std::map<int, std::unique_ptr<FileReader>> files_;
};

}  // namespace rtd::ckpt
