// The fuzz targets without libFuzzer: runs LLVMFuzzerTestOneInput on every
// file named (or in every directory named), as libFuzzer runs a corpus. The
// main build (any compiler) replays the kept corpora and every crash the
// fuzzers found, so that a regression fails CTest.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {
int replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p(argv[i]);
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file()) inputs += replay(e.path());
    } else {
      inputs += replay(p);
    }
  }
  std::printf("replayed %d input(s) without a crash\n", inputs);
  return inputs > 0 ? 0 : 1;
}
