#include "base/log.h"

#include <gtest/gtest.h>

namespace hearth {
namespace {

TEST(Log, AcceptsKnownLevels) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    EXPECT_TRUE(set_log_level(level).ok()) << level;
  }
  EXPECT_EQ(spdlog::get_level(), spdlog::level::off);
  ASSERT_TRUE(set_log_level("info").ok());
}

TEST(Log, RejectsUnknownLevelByName) {
  Status st = set_log_level("verbose");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("verbose"), std::string::npos);
}

}  // namespace
}  // namespace hearth
