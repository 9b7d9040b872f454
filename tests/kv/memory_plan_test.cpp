// plan_kv_memory: each cap (free memory, utilization share, --memory-budget, --batch
// contexts, explicit --kv-budget) binds when it is the smallest and says so; impossible
// budgets are errors naming the flag; system_memory reads this machine's RAM.
#include "kv/memory_plan.h"

#include <gtest/gtest.h>

namespace hearth::kv {
namespace {

constexpr uint64_t kGB = 1'000'000'000;

// An 80 GB device with 70 GB free, 16 GB of weights, 2 GB headroom, 1 MB blocks.
KvMemoryInputs gpu_like() {
  KvMemoryInputs in;
  in.device = {80 * kGB, 70 * kGB};
  in.weight_bytes = 16 * kGB;
  in.block_bytes = 1'000'000;
  in.headroom_bytes = 2 * kGB;
  in.utilization = 0.9;
  return in;
}

TEST(KvMemoryPlan, UtilizationShareOfTotalMinusWeightsAndHeadroom) {
  auto plan = plan_kv_memory(gpu_like());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  // 0.9 * 80 - 16 - 2 = 54 GB (free memory would allow 68).
  EXPECT_EQ(plan->num_blocks, 54'000);
  EXPECT_EQ(plan->kv_bytes, 54 * kGB);
  EXPECT_EQ(plan->limited_by, "memory utilization");
}

TEST(KvMemoryPlan, FreeMemoryBindsWhenSomethingElseHoldsTheDevice) {
  KvMemoryInputs in = gpu_like();
  in.device.free_bytes = 30 * kGB;  // another process holds 34 GB
  auto plan = plan_kv_memory(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_blocks, 28'000);  // 30 free - 2 headroom
  EXPECT_EQ(plan->limited_by, "free memory");
}

TEST(KvMemoryPlan, MemoryBudgetCapsTheProcess) {
  KvMemoryInputs in = gpu_like();
  in.memory_budget_bytes = 24 * kGB;
  auto plan = plan_kv_memory(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_blocks, 6'000);  // 24 - 16 - 2
  EXPECT_EQ(plan->limited_by, "--memory-budget");
  in.memory_budget_bytes = 18 * kGB;  // weights + headroom leave nothing
  auto none = plan_kv_memory(in);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--memory-budget"), std::string::npos);
}

TEST(KvMemoryPlan, WantedBlocksStopAutomaticSizing) {
  KvMemoryInputs in = gpu_like();
  in.wanted_blocks = 1234;
  auto plan = plan_kv_memory(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_blocks, 1234);
  EXPECT_EQ(plan->limited_by, "--batch full-context sequences");
}

TEST(KvMemoryPlan, ExplicitKvBudgetIsExactButMustFit) {
  KvMemoryInputs in = gpu_like();
  in.kv_budget_bytes = 10 * kGB + 999'999;  // partial block dropped
  in.wanted_blocks = 5;                     // ignored: the user asked for bytes
  auto plan = plan_kv_memory(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_blocks, 10'000);
  EXPECT_EQ(plan->limited_by, "--kv-budget");

  in.kv_budget_bytes = 69 * kGB;  // over 70 free - 2 headroom
  auto too_big = plan_kv_memory(in);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(too_big.status().message().find("--kv-budget"), std::string::npos);

  in.kv_budget_bytes = 10 * kGB;
  in.memory_budget_bytes = 27 * kGB;  // 16 + 2 + 10 = 28 > 27
  auto over_budget = plan_kv_memory(in);
  ASSERT_FALSE(over_budget.ok());
  EXPECT_NE(over_budget.status().message().find("--memory-budget"), std::string::npos);

  in.memory_budget_bytes = 0;
  in.kv_budget_bytes = 999'999;  // less than one block
  EXPECT_FALSE(plan_kv_memory(in).ok());
}

TEST(KvMemoryPlan, NoRoomAndBadInputsAreErrors) {
  KvMemoryInputs in = gpu_like();
  in.weight_bytes = 75 * kGB;  // over 0.9 x 80
  auto plan = plan_kv_memory(in);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(plan.status().message().find("memory utilization"), std::string::npos);

  in = gpu_like();
  in.utilization = 0;
  EXPECT_FALSE(plan_kv_memory(in).ok());
  in.utilization = 1.5;
  EXPECT_FALSE(plan_kv_memory(in).ok());
  in = gpu_like();
  in.block_bytes = 0;
  EXPECT_FALSE(plan_kv_memory(in).ok());
  in = gpu_like();
  in.device = {};  // no device figures and no other cap
  EXPECT_FALSE(plan_kv_memory(in).ok());
}

TEST(KvMemoryPlan, SystemMemoryReadsThisMachine) {
  auto m = system_memory();
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_GT(m->total_bytes, 64ull << 20);
  EXPECT_GT(m->free_bytes, 0u);
  EXPECT_LE(m->free_bytes, m->total_bytes);
}

}  // namespace
}  // namespace hearth::kv
