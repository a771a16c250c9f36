// dtrun's half of the trace: the directory checked before a job, and the
// merge of the rank files that this job's last round wrote (others left out).
#include "launcher/trace_merge.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "rt_dist/error.h"

namespace rtd::launcher {
namespace {

namespace fs = std::filesystem;

class TraceMerge : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rtd_trace_merge_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A rank file as rt_dist writes one: an event line, then which run wrote it.
  void rank_file(int rank, const std::string& run, int restart, int world) {
    std::ofstream out(dir_ / ("rank_" + std::to_string(rank) + ".json"));
    out << "{\"traceEvents\":[\n"
        << "{\"ph\":\"X\",\"pid\":" << rank << ",\"tid\":1,\"name\":\"step of " << run << "\"}\n"
        << "],\"otherData\":{\"rank\":" << rank << ",\"dropped_events\":0,\"run\":\"" << run
        << "\",\"restart\":" << restart << ",\"world\":" << world << "}}\n";
  }
  std::string merged() {
    std::ifstream in(dir_ / "trace.json");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  fs::path dir_;
};

TEST_F(TraceMerge, TakesTheFilesOfThisJobsLastRoundOnly) {
  rank_file(0, "job", 1, 2);
  rank_file(1, "job", 1, 2);
  rank_file(2, "job", 0, 4);    // an earlier round, with more ranks
  rank_file(3, "older", 0, 4);  // another job in the same directory
  const MergedTrace m = merge_traces(dir_.string(), {.run = "job", .restart = 1, .world = 2});
  EXPECT_EQ(m.ranks, 2);
  EXPECT_EQ(m.skipped, 2);
  const std::string text = merged();
  EXPECT_NE(text.find("\"pid\":0"), std::string::npos) << text;
  EXPECT_NE(text.find("\"pid\":1"), std::string::npos) << text;
  EXPECT_EQ(text.find("\"pid\":2"), std::string::npos) << text;
  EXPECT_EQ(text.find("older"), std::string::npos) << text;
  EXPECT_EQ(text.rfind("{\"traceEvents\":[\n", 0), 0u) << text;
}

TEST_F(TraceMerge, NoFileOfThisJobWritesNothing) {
  rank_file(0, "older", 0, 1);
  const MergedTrace m = merge_traces(dir_.string(), {.run = "job", .restart = 0, .world = 1});
  EXPECT_EQ(m.ranks, 0);
  EXPECT_EQ(m.skipped, 1);
  EXPECT_FALSE(fs::exists(dir_ / "trace.json"));
}

TEST_F(TraceMerge, AFileCutShortIsNamed) {
  std::ofstream(dir_ / "rank_0.json") << "{\"traceEvents\":[\n";
  try {
    merge_traces(dir_.string(), {.run = "job", .restart = 0, .world = 1});
    FAIL() << "a cut-short file was merged";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank_0.json is not a rank's trace"), std::string::npos)
        << e.what();
  }
}

TEST_F(TraceMerge, TheDirectoryIsMadeOrRefusedBeforeTheJob) {
  EXPECT_NO_THROW(prepare_trace_dir((dir_ / "a" / "b").string()));
  EXPECT_TRUE(fs::is_directory(dir_ / "a" / "b"));
  std::ofstream(dir_ / "file") << "x";
  try {
    prepare_trace_dir((dir_ / "file").string());
    FAIL() << "a file was taken for a directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kConfig);
    EXPECT_NE(std::string(e.what()).find("a file, not a directory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(prepare_trace_dir((dir_ / "file" / "sub").string()), Error);
}

}  // namespace
}  // namespace rtd::launcher
