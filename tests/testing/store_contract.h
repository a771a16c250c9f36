// The behaviour every Store implementation must show; run against each one.
#pragma once

#include <gtest/gtest.h>

#include <chrono>

#include "rt_dist/error.h"
#include "rt_dist/store.h"

namespace rtd::testing_util {

inline void check_store_contract(Store& store) {
  using std::chrono::milliseconds;
  store.set("a", std::string("x\0y", 3));
  EXPECT_EQ(store.get("a", milliseconds(100)), std::string("x\0y", 3)) << "values are bytes";
  EXPECT_EQ(*store.try_get("a"), std::string("x\0y", 3));
  EXPECT_FALSE(store.try_get("missing").has_value());

  try {
    store.get("missing", milliseconds(50));
    ADD_FAILURE() << "get of a missing key must time out";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kTimeout);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }

  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(store.add("n", -2), 3);
  EXPECT_EQ(store.add("n", 0), 3);

  EXPECT_EQ(store.compare_set("c", "", "first"), "first") << "missing key + empty expected sets";
  EXPECT_EQ(store.compare_set("c", "wrong", "second"), "first") << "mismatch leaves the value";
  EXPECT_EQ(store.compare_set("c", "first", "second"), "second");
  EXPECT_EQ(store.compare_set("absent", "something", "v"), "") << "missing key, nonempty expected";
  EXPECT_FALSE(store.try_get("absent").has_value());

  EXPECT_TRUE(store.check({"a", "n", "c"}));
  EXPECT_FALSE(store.check({"a", "missing"}));
  EXPECT_TRUE(store.remove("a"));
  EXPECT_FALSE(store.remove("a"));
  EXPECT_FALSE(store.check({"a"}));
}

}  // namespace rtd::testing_util
