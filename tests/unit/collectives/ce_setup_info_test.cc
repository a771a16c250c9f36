// The copy-engine all-reduce's setup record survives the store as text.
#include "collectives/nccl/ce_setup_info.h"

#include <gtest/gtest.h>

#include <cstring>

namespace rtd::nccl {
namespace {

TEST(CeSetupInfo, HexRoundTripsAndRejectsWhatIsNotHex) {
  const unsigned char bytes[] = {0x00, 0x7f, 0x80, 0xff, 0x12};
  const std::string text = hex(bytes, sizeof(bytes));
  EXPECT_EQ(text, "007f80ff12");
  unsigned char back[5] = {};
  ASSERT_TRUE(unhex(text, back, sizeof(back)));
  EXPECT_EQ(0, std::memcmp(bytes, back, sizeof(bytes)));
  EXPECT_FALSE(unhex("007f80ff1", back, sizeof(back))) << "odd length";
  EXPECT_FALSE(unhex("007F80FF12", back, sizeof(back))) << "not what hex() writes";
  EXPECT_FALSE(unhex("zz7f80ff12", back, sizeof(back)));
}

TEST(CeSetupInfo, RecordRoundTripsWithAReasonThatHoldsSpaces) {
  RankInfo info;
  info.ok = true;
  info.flags_handle = "abcd";
  info.handles = {"0011", "2233"};
  info.offsets = {0, 4096};
  info.counts = {1000, 7};
  info.dtypes = {2, 5};
  info.why = "";
  RankInfo back = RankInfo::decode(info.encode());
  EXPECT_TRUE(back.ok);
  EXPECT_EQ(back.flags_handle, "abcd");
  EXPECT_EQ(back.handles, info.handles);
  EXPECT_EQ(back.offsets, info.offsets);
  EXPECT_EQ(back.counts, info.counts);
  EXPECT_EQ(back.dtypes, info.dtypes);

  RankInfo refused;
  refused.why = "a buffer is not on the GPU";
  RankInfo r = RankInfo::decode(refused.encode());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.why, "a buffer is not on the GPU");
  EXPECT_TRUE(r.flags_handle.empty());
}

TEST(CeSetupInfo, GarbageIsARefusalNotACrash) {
  RankInfo r = RankInfo::decode("1 abcd 3 0011 0");
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.why.empty());
  EXPECT_FALSE(RankInfo::decode("").ok);
}

TEST(CeSetupInfo, HostNameIsOneWord) {
  const std::string host = host_name();
  EXPECT_FALSE(host.empty());
  EXPECT_EQ(host.find(' '), std::string::npos);
}

}  // namespace
}  // namespace rtd::nccl
