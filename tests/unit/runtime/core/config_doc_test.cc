// docs/config.md and the configuration table stay in step.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "runtime/core/config.h"

namespace rtd {
namespace {

TEST(ConfigDoc, EveryVariableOfTheTableIsDocumented) {
  std::ifstream file(std::string(RTD_SOURCE_DIR) + "/docs/config.md");
  ASSERT_TRUE(file.good()) << "docs/config.md is missing";
  std::stringstream text;
  text << file.rdbuf();
  for (const auto& var : config_table()) {
    EXPECT_NE(text.str().find("| `" + std::string(var.name) + "` |"), std::string::npos)
        << var.name << " is not in docs/config.md";
  }
}

}  // namespace
}  // namespace rtd
