#include "base/status.h"

#include <gtest/gtest.h>

#include "base/check.h"

namespace hearth {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument_error("expected a positive number, got {}", x);
  return x;
}

Result<int> doubled(int x) {
  HEARTH_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return v * 2;
}

Status check_all(int a, int b) {
  HEARTH_RETURN_IF_ERROR(parse_positive(a).status());
  HEARTH_RETURN_IF_ERROR(parse_positive(b).status().with_context("second value"));
  return ok_status();
}

TEST(Status, OkAndErrorCarryCodeAndMessage) {
  EXPECT_TRUE(ok_status().ok());
  Status st = not_found_error("tensor '{}' missing", "lm_head.weight");
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_EQ(st.message(), "tensor 'lm_head.weight' missing");
  EXPECT_EQ(st.to_string(), "not found: tensor 'lm_head.weight' missing");
}

TEST(Status, ContextPrefixesMessage) {
  Status st = parse_error("bad byte").with_context("reading config.json");
  EXPECT_EQ(st.message(), "reading config.json: bad byte");
  EXPECT_EQ(st.code(), ErrorCode::kParse);
  EXPECT_TRUE(ok_status().with_context("ignored").ok());
}

TEST(Result, PropagatesThroughMacros) {
  EXPECT_EQ(*doubled(21), 42);
  Result<int> bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.value_or(7), 7);
  Status st = check_all(1, -2);
  EXPECT_EQ(st.message(), "second value: expected a positive number, got -2");
}

TEST(Result, OkStatusIsNotAValue) {
  Result<int> r{ok_status()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInternal);
}

TEST(CheckDeathTest, FailedCheckAborts) {
  int x = -1;
  EXPECT_DEATH(HEARTH_CHECK(x > 0, "x={}", x), "CHECK failed.*x > 0 x=-1");
}

}  // namespace
}  // namespace hearth
