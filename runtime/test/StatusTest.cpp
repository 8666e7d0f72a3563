//===- StatusTest.cpp - tests of Status and StatusOr ----------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/Status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

using namespace spin::runtime;

namespace {

StatusOr<int> parsePositive(int value) {
  if (value <= 0)
    return Status::error("value " + std::to_string(value) + " is not positive");
  return value;
}

TEST(Status, SuccessHasNoMessage) {
  Status status = Status::success();
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.message(), "");
  EXPECT_TRUE(Status().ok());
}

TEST(Status, ErrorKeepsItsMessage) {
  Status status = Status::error("request 42 is not in the state pool");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "request 42 is not in the state pool");
}

TEST(Status, EmptyErrorMessageStillFails) {
  Status status = Status::error("");
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "unknown error");
}

TEST(StatusOr, HoldsValueOrError) {
  StatusOr<int> good = parsePositive(3);
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good.status().ok());
  EXPECT_EQ(*good, 3);
  EXPECT_EQ(good.value(), 3);

  StatusOr<int> bad = parsePositive(-2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message(), "value -2 is not positive");
  EXPECT_EQ(bad.status().message(), "value -2 is not positive");
}

TEST(StatusOr, HoldsMoveOnlyValues) {
  StatusOr<std::unique_ptr<int>> held(std::make_unique<int>(7));
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(**held, 7);
  std::unique_ptr<int> taken = std::move(held).value();
  EXPECT_EQ(*taken, 7);
}

TEST(StatusOr, SuccessStatusWithoutValueIsAnError) {
  StatusOr<int> odd(Status::success());
  EXPECT_FALSE(odd.ok());
  EXPECT_NE(odd.message().find("successful Status"), std::string::npos);
}

TEST(StatusOrDeathTest, ValueOfErrorAborts) {
  StatusOr<int> bad = parsePositive(0);
  EXPECT_DEATH((void)bad.value(), "value 0 is not positive");
}

} // namespace
