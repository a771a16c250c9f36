// Checkpoints that another job, a full disk or a crash cannot break: the
// directory's lock, a step saved again, failed saves, damaged manifests and
// `latest`, loads that fail, and the store keys saves leave.
#include <gtest/gtest.h>

#include "runtime/core/store/memory_store.h"
#include "sharding/checkpoint/files.h"
#include "sharding/checkpoint/manifest.h"
#include "tests/unit/sharding/checkpoint_fixture.h"

namespace rtd::ckpt {
namespace {

State one_tensor(std::vector<float>& w) {
  State s;
  s.tensors.push_back(Tensor{"w", DType::kFloat32, {10, 7}, {{0, 70, w.data()}}});
  return s;
}

// Job A holds the directory while it lives; job B's save there fails naming
// A; once A is gone (or died, leaving its line), B takes it.
TEST_F(CheckpointTest, TwoJobsCannotShareADirectory) {
  std::vector<float> w(70, 1.0f);
  auto store_a = make_memory_store(), store_b = make_memory_store();
  {
    Checkpointer a(*store_a, 0, 1, options());
    a.save(1, one_tensor(w));
    try {
      Checkpointer(*store_b, 0, 1, options()).save(2, one_tensor(w));
      FAIL() << "a second job saved into a directory the first one holds";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("in use by another job"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(getpid())), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(list_checkpoints(dir_.string()), (std::vector<std::int64_t>{1}))
        << "job B's attempt must not touch job A's checkpoints";
    a.save(3, one_tensor(w));
  }
  // A job that died leaves its line; the kernel dropped its lock.
  std::ofstream(dir_ / ".lock") << "host gone, pid 999999, since 2026-01-01T00:00:00Z\n";
  Checkpointer(*make_memory_store(), 0, 1, options()).save(4, one_tensor(w));
  EXPECT_EQ(list_checkpoints(dir_.string()), (std::vector<std::int64_t>{4, 3, 1}));
}

// The same step saved again replaces the old one by an exchange: the new
// values load, and nothing is left aside. A crash of the fallback (rename
// aside) is undone at the next save.
TEST_F(CheckpointTest, AStepSavedAgainReplacesTheOldOneAtOnce) {
  save(2, 5, options());
  save(2, 5, options());
  EXPECT_EQ(load_and_check(2, 5), 5);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".old"), std::string::npos) << e.path();
  // A crash between the fallback's two renames: only step_5.old is there.
  fs::rename(dir_ / "step_00000005", dir_ / "step_00000005.old");
  EXPECT_TRUE(list_checkpoints(dir_.string()).empty());
  save(2, 6, options());
  EXPECT_EQ(list_checkpoints(dir_.string()), (std::vector<std::int64_t>{6, 5}));
}

TEST_F(CheckpointTest, ExchangeSwapsTwoDirectories) {
  fs::create_directories(dir_ / "a");
  fs::create_directories(dir_ / "b");
  std::ofstream(dir_ / "a" / "x") << "a";
  if (!exchange_entries((dir_ / "a").string(), (dir_ / "b").string()))
    GTEST_SKIP() << "this filesystem has no RENAME_EXCHANGE (the fallback is tested above)";
  EXPECT_TRUE(fs::exists(dir_ / "b" / "x"));
  EXPECT_FALSE(fs::exists(dir_ / "a" / "x"));
}

// A save that fails leaves no temporary directory behind, names the space
// free, and with continue_after_failed_save the job goes on.
TEST_F(CheckpointTest, AFailedSaveCleansUpAndCanLetTheJobGoOn) {
  save(2, 1, options());
  auto failing = [&](Options o) {
    run_ranks(2, [&](Store& store, int rank) {
      std::vector<float> w(70);
      State s;
      s.tensors.push_back(
          Tensor{"w", DType::kFloat32, {10, 7}, {{rank == 1 ? 69u : 0u, 2, w.data()}}});
      Checkpointer(store, rank, 2, o).save(2, s);
    });
  };
  try {
    failing(options());
    FAIL() << "expected the save to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bytes are free in"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("its part: 8 bytes"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "step_00000002.tmp")) << "a failed save leaves nothing";
  Options go_on = options();
  go_on.continue_after_failed_save = true;
  EXPECT_NO_THROW(failing(go_on));
  EXPECT_FALSE(fs::exists(dir_ / "step_00000002.tmp"));
  EXPECT_EQ(load_and_check(2, 1), 1);
}

// After the commit, a `latest` that cannot be replaced is a warning, not a
// save that failed: the checkpoint is there and loads.
TEST_F(CheckpointTest, ALatestThatCannotBeWrittenDoesNotUnsaveTheCheckpoint) {
  save(1, 1, options());
  fs::remove(dir_ / "latest");
  fs::create_directories(dir_ / "latest" / "in_the_way");  // rename over it fails
  EXPECT_NO_THROW(save(1, 2, options()));
  EXPECT_EQ(list_checkpoints(dir_.string()), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(load_and_check(1, 2), 2);
}

TEST_F(CheckpointTest, ADamagedManifestOrLatestIsRefused) {
  save(1, 1, options());
  const fs::path manifest = dir_ / "step_00000001" / "manifest.json";
  std::ifstream in(manifest);
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  // A changed number parses, but fails the manifest's own sum.
  const auto at = json.find("\"count\": \"");
  ASSERT_NE(at, std::string::npos) << json;
  std::string changed = json;
  changed[at + 10] = changed[at + 10] == '1' ? '2' : '1';
  std::ofstream(manifest) << changed;
  std::string error = load_error(1, false);
  EXPECT_NE(error.find("CRC-32C"), std::string::npos) << error;
  std::ofstream(manifest) << json;
  EXPECT_EQ(read_latest(dir_.string()), "step_00000001");
  std::ofstream(dir_ / "latest") << "step_00000009\ncrc32c 0x00000000\n";
  EXPECT_EQ(read_latest(dir_.string()), "") << "a latest that fails its sum names nothing";
}

// Values no checkpoint holds are refused before anything is sized from them,
// even when the manifest's sum is right (a hostile file, not a damaged one).
TEST_F(CheckpointTest, ImpossibleSizesInAManifestAreRefused) {
  save(1, 1, options());
  const std::string step = (dir_ / "step_00000001").string();
  const proto::CheckpointManifest good = read_manifest(step);
  auto refused = [&](const std::function<void(proto::CheckpointManifest&)>& damage,
                     const std::string& needle) {
    proto::CheckpointManifest m = good;
    damage(m);
    replace_file(step + "/" + kManifestName, manifest_to_json(m));
    try {
      read_manifest(step);
      ADD_FAILURE() << "accepted a manifest that should hold " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused([](auto& m) { m.mutable_tensors(0)->set_shape(0, -5); }, "negative dimension");
  refused(
      [](auto& m) {
        m.mutable_tensors(0)->clear_shape();
        for (int i = 0; i < 4; ++i) m.mutable_tensors(0)->add_shape(1 << 20);
      },
      "more elements");
  refused([](auto& m) { m.mutable_tensors(0)->mutable_pieces(0)->set_file(7); }, "not listed");
  refused([](auto& m) { m.mutable_tensors(0)->mutable_pieces(0)->set_count(~0ull); }, "outside");
  refused([](auto& m) { m.mutable_tensors(0)->mutable_pieces(0)->set_offset(~0ull - 3); },
          "past the end");
  refused([](auto& m) { m.mutable_files(0)->set_name("../../etc/passwd"); }, "plain file name");
  refused([](auto& m) { m.set_world_size(-1); }, "world_size");
  refused([](auto& m) { *m.add_tensors() = m.tensors(0); }, "listed twice");
  // What cannot be assembled whole is said before its memory is allocated
  // (rtd-ckpt once allocated a 2^55-byte shape: a bare std::bad_alloc; and
  // 4 GB before it found elements that no piece holds).
  proto::CheckpointManifest m = good;
  EXPECT_EQ(whole_tensor_refusal(m, m.tensors(0)), "");
  m.mutable_tensors(0)->clear_shape();
  m.mutable_tensors(0)->add_shape(std::int64_t{1} << 53);
  EXPECT_NE(whole_tensor_refusal(m, m.tensors(0)).find("more than all its files'"),
            std::string::npos);
  m = good;
  m.mutable_tensors(0)->mutable_pieces(0)->set_count(3);
  EXPECT_NE(whole_tensor_refusal(m, m.tensors(0)).find("is in no piece"), std::string::npos);
}

// Step directories swapped (or renamed): each manifest says its own step,
// and a directory named for another is refused, naming both.
TEST_F(CheckpointTest, SwappedStepDirectoriesAreRefused) {
  save(1, 1, options());
  save(1, 2, options());
  fs::rename(dir_ / "step_00000001", dir_ / "swap");
  fs::rename(dir_ / "step_00000002", dir_ / "step_00000001");
  fs::rename(dir_ / "swap", dir_ / "step_00000002");
  try {
    read_manifest((dir_ / "step_00000002").string());
    ADD_FAILURE() << "a swapped step directory was read as its name's step";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is of step 1, but its directory is step_00000002"),
              std::string::npos)
        << e.what();
  }
  const std::string error = load_error(1, true);
  EXPECT_NE(error.find("renamed or swapped"), std::string::npos) << error;
}

// Two jobs' checkpoint directories, a step of one copied over the other's:
// every manifest carries its directory's series, and a step of another
// series is refused, naming both (a load falls back to this job's steps). A
// directory copied whole keeps its series and loads; one saved before series
// were written takes its newest step's.
TEST_F(CheckpointTest, AStepCopiedInFromAnotherJobsDirectoryIsRefused) {
  save(1, 1, options());
  save(1, 2, options());
  const fs::path mine = dir_;
  const std::string series = read_series(mine.string());
  ASSERT_EQ(series.size(), 16u);
  EXPECT_EQ(read_manifest((mine / "step_00000002").string()).series(), series);

  dir_ = mine.string() + "_other";
  fs::remove_all(dir_);
  save(1, 2, options());
  const std::string other = read_series(dir_.string());
  EXPECT_NE(other, series);
  fs::remove_all(mine / "step_00000002");
  fs::copy(dir_ / "step_00000002", mine / "step_00000002", fs::copy_options::recursive);
  fs::remove_all(dir_);
  dir_ = mine;
  try {
    read_manifest((mine / "step_00000002").string());
    ADD_FAILURE() << "a step copied in from another job's directory was read as this job's";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("saved in another checkpoint directory (series " + other),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(series), std::string::npos) << e.what();
  }
  EXPECT_EQ(load_and_check(1, 1), 1) << "the load falls back to this job's own step";

  // Copied whole: the copy is the same series, and loads.
  fs::remove_all(mine / "step_00000002");
  const fs::path copy = mine.string() + "_copy";
  fs::remove_all(copy);
  fs::copy(mine, copy, fs::copy_options::recursive);
  dir_ = copy;
  EXPECT_EQ(load_and_check(1, 1), 1);
  // Saved before series were written: the first save takes the newest step's.
  fs::remove(copy / kSeriesName);
  save(1, 3, options());
  EXPECT_EQ(read_series(copy.string()), series);
  // A series file edited by hand is named.
  std::ofstream(copy / kSeriesName, std::ios::trunc) << "not hex\n";
  try {
    read_manifest((copy / "step_00000003").string());
    ADD_FAILURE() << "a malformed series file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is malformed"), std::string::npos) << e.what();
  }
  // A manifest whose series is not one (its sum made to match) is named.
  fs::remove(copy / kSeriesName);
  proto::CheckpointManifest m = read_manifest((copy / "step_00000003").string());
  m.set_series(std::string(4096, 'z'));
  std::ofstream(copy / "step_00000003" / kManifestName, std::ios::trunc) << manifest_to_json(m);
  try {
    read_manifest((copy / "step_00000003").string());
    ADD_FAILURE() << "a manifest with a malformed series was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has a malformed series"), std::string::npos) << e.what();
  }
  fs::remove_all(copy);
  dir_ = mine;
}

// A save cut short (the job stopped or killed mid-save) leaves its
// temporary directory; the next job's first save, holding the directory,
// removes it.
TEST_F(CheckpointTest, ASaveCutShortIsRemovedByTheNextJobsFirstSave) {
  save(1, 1, options());
  fs::create_directories(dir_ / "step_00000007.tmp");
  std::ofstream(dir_ / "step_00000007.tmp" / "rank_00000.bin") << "half";
  save(1, 2, options());
  EXPECT_FALSE(fs::exists(dir_ / "step_00000007.tmp"));
  EXPECT_EQ(list_checkpoints(dir_.string()), (std::vector<std::int64_t>{2, 1}));
}

// Links planted in a checkpoint directory (shared, or restored from an
// archive) never make a save write through them: the lock, `latest`'s
// temporary and a step's files are refused or replaced, never followed.
TEST_F(CheckpointTest, LinksPlantedInTheDirectoryAreNeverWrittenThrough) {
  fs::create_directories(dir_);
  const fs::path victim = dir_.string() + "_victim";
  std::ofstream(victim) << "precious\n";
  auto victim_intact = [&] {
    std::ifstream in(victim);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text == "precious\n";
  };
  std::vector<float> w(70, 1.0f);
  for (const char* planted : {".lock", "latest.tmp", "latest"}) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::create_symlink(victim, dir_ / planted);
    try {
      Checkpointer(*make_memory_store(), 0, 1, options()).save(1, one_tensor(w));
      ADD_FAILURE() << "saved into a directory holding a link " << planted;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(victim_intact()) << "written through " << planted;
  }
  // A file made anew replaces a link left under its name, never follows it.
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  fs::create_symlink(victim, dir_ / "file.tmp");
  replace_file((dir_ / "file").string(), "new");
  EXPECT_TRUE(victim_intact());
  EXPECT_FALSE(fs::is_symlink(dir_ / "file"));
  // A hard link as the lock: refused (the lock is truncated and written).
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  fs::create_hard_link(victim, dir_ / ".lock");
  EXPECT_THROW(Checkpointer(*make_memory_store(), 0, 1, options()).save(1, one_tensor(w)), Error);
  EXPECT_TRUE(victim_intact());
  fs::remove(victim);
}

// A load whose checkpoint fails its check leaves every range as it was,
// even the ones whose pieces were fine.
TEST_F(CheckpointTest, ALoadThatFailsLeavesTheStateUntouched) {
  save(1, 1, options(3, 64));  // pieces of 64 bytes: several per tensor
  const fs::path file = dir_ / "step_00000001" / "rank_00000.bin";
  flip_byte(file, fs::file_size(file) / 2);  // inside a piece after the first
  run_ranks(1, [&](Store& store, int rank) {
    std::vector<float> w(70, -1.0f);
    std::vector<std::int64_t> m(33, -1);
    State s;
    s.tensors.push_back(Tensor{"w", DType::kFloat32, {10, 7}, {{0, 70, w.data()}}});
    s.tensors.push_back(Tensor{"m", DType::kInt64, {33}, {{0, 33, m.data()}}});
    EXPECT_THROW(Checkpointer(store, rank, 1, options()).load(s, false), Error);
    for (float v : w) EXPECT_EQ(v, -1.0f);
    for (std::int64_t v : m) EXPECT_EQ(v, -1);
  });
}

// Each save's keys are removed once every rank has read them: 20 saves
// leave what one save needs, not 20 times that.
TEST_F(CheckpointTest, SavesLeaveABoundedNumberOfStoreKeys) {
  auto store = std::make_shared<MemoryStore>();
  run_ranks(
      2,
      [&](Store& s, int rank) {
        std::vector<float> w(70, 1.0f);
        Checkpointer c(s, rank, 2, options());
        State state;
        state.tensors.push_back(
            Tensor{"w", DType::kFloat32, {10, 7}, {{35u * rank, 35, w.data() + 35 * rank}}});
        for (int step = 1; step <= 20; ++step) c.save(step, state);
      },
      store);
  EXPECT_LE(store->keys(), 4u) << "keys left after 20 saves of 2 ranks";
}

}  // namespace
}  // namespace rtd::ckpt
