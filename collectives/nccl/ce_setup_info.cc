// RankInfo's text form: fields separated by spaces, the reason last.
#include "collectives/nccl/ce_setup_info.h"

#include <unistd.h>

#include <sstream>

namespace rtd::nccl {

std::string hex(const void* data, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

bool unhex(const std::string& text, void* data, std::size_t n) {
  if (text.size() != 2 * n) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  auto* p = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string host = name;
  for (char& c : host) {
    if (c == ' ') c = '_';
  }
  return host.empty() ? "?" : host;
}

std::string RankInfo::encode() const {
  std::ostringstream out;
  out << (ok ? 1 : 0) << ' ' << (flags_handle.empty() ? "-" : flags_handle) << ' '
      << handles.size();
  for (std::size_t i = 0; i < handles.size(); ++i)
    out << ' ' << handles[i] << ' ' << offsets[i] << ' ' << counts[i] << ' ' << dtypes[i];
  out << ' ' << why;  // last: may hold spaces
  return out.str();
}

RankInfo RankInfo::decode(const std::string& text) {
  RankInfo info;
  std::istringstream in(text);
  int ok = 0;
  std::size_t n = 0;
  in >> ok >> info.flags_handle >> n;
  info.ok = ok == 1 && static_cast<bool>(in);
  if (info.flags_handle == "-") info.flags_handle.clear();
  for (std::size_t i = 0; i < n && in; ++i) {
    std::string h;
    std::size_t off = 0, count = 0;
    int dtype = 0;
    in >> h >> off >> count >> dtype;
    info.handles.push_back(h);
    info.offsets.push_back(off);
    info.counts.push_back(count);
    info.dtypes.push_back(dtype);
  }
  if (!in) {
    info.ok = false;
    info.why = "unreadable setup record";
    return info;
  }
  std::getline(in, info.why);
  if (!info.why.empty() && info.why[0] == ' ') info.why.erase(0, 1);
  return info;
}

}  // namespace rtd::nccl
