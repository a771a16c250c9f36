// What each rank publishes while setting up the copy-engine all-reduce, as
// text for the store: whether it can take part (and why not), and the handles
// through which its peers map its flags and buffers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace rtd::nccl {

// Lowercase hex of n bytes, and back (false when text is not 2n hex digits).
std::string hex(const void* data, std::size_t n);
bool unhex(const std::string& text, void* data, std::size_t n);

// This machine's host name ("?" if it has none).
std::string host_name();

struct RankInfo {
  bool ok = false;
  std::string why;                   // why not, when !ok (may hold spaces)
  std::string flags_handle;          // hex of a cudaIpcMemHandle_t; empty when !ok
  std::vector<std::string> handles;  // per buffer: hex of its allocation's handle,
  std::vector<std::size_t> offsets;  // the buffer's offset in that allocation,
  std::vector<std::size_t> counts;   // its element count,
  std::vector<int> dtypes;           // and its DType

  std::string encode() const;
  static RankInfo decode(const std::string& text);
};

}  // namespace rtd::nccl
