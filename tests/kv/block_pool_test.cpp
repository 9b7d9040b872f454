// BlockPool: allocation until empty, reference counting, and the checks that turn double
// frees into located failures.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <set>

namespace hearth::kv {
namespace {

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsDry) {
  BlockPool pool(4);
  std::set<BlockId> got;
  for (int i = 0; i < 4; ++i) {
    auto id = pool.allocate();
    ASSERT_TRUE(id.has_value());
    EXPECT_EQ(pool.ref_count(*id), 1);
    got.insert(*id);
  }
  EXPECT_EQ(got, (std::set<BlockId>{0, 1, 2, 3}));
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.num_free(), 0);
}

TEST(BlockPool, ReferenceCountingAndFree) {
  BlockPool pool(2);
  BlockId a = *pool.allocate();
  pool.retain(a);
  EXPECT_EQ(pool.ref_count(a), 2);
  EXPECT_EQ(pool.release(a), 1);
  EXPECT_EQ(pool.release(a), 0);
  EXPECT_FALSE(pool.is_free(a));  // zero references, retained until freed
  pool.retain(a);                 // a cache may revive it
  EXPECT_EQ(pool.release(a), 0);
  pool.free(a);
  EXPECT_TRUE(pool.is_free(a));
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(BlockPoolDeathTest, DoubleFreeAndUseAfterFreeAbort) {
  EXPECT_DEATH(
      {
        BlockPool pool(1);
        BlockId a = *pool.allocate();
        pool.release(a);
        pool.release(a);
      },
      "double free");
  EXPECT_DEATH(
      {
        BlockPool pool(1);
        BlockId a = *pool.allocate();
        pool.release(a);
        pool.free(a);
        pool.retain(a);
      },
      "retaining free block");
  EXPECT_DEATH(
      {
        BlockPool pool(1);
        pool.free(0);
      },
      "freed twice");
}

}  // namespace
}  // namespace hearth::kv
