#include "launcher/python_path.h"

#include <filesystem>
#include <system_error>

#ifndef RTD_INSTALL_PYTHON_DIR
#define RTD_INSTALL_PYTHON_DIR "lib/rt_dist/python"
#endif

namespace rtd::launcher {

std::string rt_dist_python_dir(const std::string& exe) {
  namespace fs = std::filesystem;
  const fs::path bin = fs::path(exe).parent_path();
  for (const fs::path& dir : {bin / ".." / RTD_INSTALL_PYTHON_DIR,
                              bin / ".." / "lib/rt_dist/python", bin / ".." / "python"}) {
    std::error_code ec;
    if (fs::exists(dir / "rt_dist" / "torch" / "__init__.py", ec)) {
      fs::path clean = fs::weakly_canonical(dir, ec);
      return ec ? dir.string() : clean.string();
    }
  }
  return "";
}

std::string python_path_with(const std::string& dir, const std::string& current) {
  if (dir.empty()) return current;
  if (current == dir || current.rfind(dir + ":", 0) == 0) return current;
  return current.empty() ? dir : dir + ":" + current;
}

}  // namespace rtd::launcher
