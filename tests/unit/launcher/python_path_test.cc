#include "launcher/python_path.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace rtd::launcher {
namespace {

namespace fs = std::filesystem;

TEST(PythonPath, OursGoesFirstOnce) {
  EXPECT_EQ(python_path_with("/opt/p", ""), "/opt/p");
  EXPECT_EQ(python_path_with("/opt/p", "/home/u/lib"), "/opt/p:/home/u/lib");
  EXPECT_EQ(python_path_with("/opt/p", "/opt/p:/home/u/lib"), "/opt/p:/home/u/lib");
  EXPECT_EQ(python_path_with("/opt/p", "/opt/p"), "/opt/p");
  EXPECT_EQ(python_path_with("", "/home/u/lib"), "/home/u/lib");
  // A prefix of another folder is not the folder.
  EXPECT_EQ(python_path_with("/opt/p", "/opt/py:/x"), "/opt/p:/opt/py:/x");
}

// A tree with bin/dtrun and the package where `where` says; returns bin/dtrun.
fs::path make_tree(const fs::path& root, const std::string& where) {
  fs::create_directories(root / "bin");
  if (!where.empty()) {
    fs::create_directories(root / where / "rt_dist" / "torch");
    std::ofstream(root / where / "rt_dist" / "torch" / "__init__.py") << "\n";
  }
  return root / "bin" / "dtrun";
}

TEST(PythonPath, FindsTheInstalledAndTheBuildTreesPackage) {
  const fs::path root = fs::temp_directory_path() / ("rtd_pp_" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto installed = make_tree(root / "install", "lib/rt_dist/python");
  EXPECT_EQ(rt_dist_python_dir(installed.string()),
            fs::weakly_canonical(root / "install" / "lib/rt_dist/python").string());
  auto build = make_tree(root / "build", "python");
  EXPECT_EQ(rt_dist_python_dir(build.string()),
            fs::weakly_canonical(root / "build" / "python").string());
  auto none = make_tree(root / "none", "");
  EXPECT_EQ(rt_dist_python_dir(none.string()), "");
  fs::remove_all(root);
}

}  // namespace
}  // namespace rtd::launcher
