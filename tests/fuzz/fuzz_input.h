// Reading a fuzzer's bytes as a sequence of choices: numbers, and chunks of
// bytes with a length in front. Past the end, zeros and empty chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rtd::fuzz {

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  std::uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | byte();
    return v;
  }
  // A chunk of up to 255 bytes (its length is the next byte).
  std::string chunk() {
    const std::size_t n = std::min<std::size_t>(byte(), size_ - std::min(at_, size_));
    std::string out(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

}  // namespace rtd::fuzz
