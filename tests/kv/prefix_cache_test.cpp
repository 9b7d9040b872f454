// PrefixCache: chained hashing (namespace and every earlier token matter), longest-prefix
// lookup, sharing without consuming the donor, LRU eviction of idle blocks and the cap.
#include "kv/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>

#include "base/hash.h"

namespace hearth::kv {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(PrefixCacheHash, ChainsParentTokensAndNamespace) {
  std::vector<int32_t> block = {1, 2, 3, 4};
  uint64_t h = PrefixCache::chain_hash(0, block, 7);
  EXPECT_EQ(h, PrefixCache::chain_hash(0, block, 7));
  EXPECT_NE(h, PrefixCache::chain_hash(1, block, 7));  // parent
  EXPECT_NE(h, PrefixCache::chain_hash(0, block, 8));  // namespace
  std::vector<int32_t> other = {1, 2, 3, 5};
  EXPECT_NE(h, PrefixCache::chain_hash(0, other, 7));  // tokens
  // Defined as xxh3 over [parent][namespace][tokens]: recompute independently.
  std::vector<uint8_t> bytes(32, 0);
  bytes[8] = 7;
  for (int i = 0; i < 4; ++i) bytes[16 + 4 * i] = static_cast<uint8_t>(block[i]);
  EXPECT_EQ(h, xxh3_64(bytes));

  BlockPool pool(1);
  PrefixCache cache(pool, {.block_size = 4, .namespace_hash = 7});
  std::vector<uint64_t> hashes;
  std::vector<int32_t> tokens = iota_tokens(10);
  cache.extend_hashes(tokens, hashes);
  ASSERT_EQ(hashes.size(), 2u);  // the partial third block has no name
  EXPECT_EQ(hashes[0], PrefixCache::chain_hash(0, std::span(tokens).first(4), 7));
  EXPECT_EQ(hashes[1], PrefixCache::chain_hash(hashes[0], std::span(tokens).subspan(4, 4), 7));
  tokens.push_back(10);
  tokens.push_back(11);
  cache.extend_hashes(tokens, hashes);  // incremental: only the new full block
  EXPECT_EQ(hashes.size(), 3u);
}

// Fills `count` blocks for `tokens`, publishes them, returns the block table.
std::vector<BlockId> compute_blocks(PrefixCache& cache, const std::vector<uint64_t>& hashes,
                                    int count) {
  std::vector<BlockId> table;
  for (int i = 0; i < count; ++i) {
    BlockId id = *cache.allocate();
    cache.publish(id, hashes[i]);
    table.push_back(id);
  }
  return table;
}

TEST(PrefixCache, LongestPrefixSharedWithoutConsumingTheDonor) {
  BlockPool pool(8);
  PrefixCache cache(pool, {.block_size = 4});
  std::vector<uint64_t> donor_hashes;
  cache.extend_hashes(iota_tokens(12), donor_hashes);
  std::vector<BlockId> donor = compute_blocks(cache, donor_hashes, 3);

  // Same first 8 tokens, different third block.
  std::vector<int32_t> tokens = iota_tokens(8);
  for (int32_t t : {100, 101, 102, 103}) tokens.push_back(t);
  std::vector<uint64_t> hashes;
  cache.extend_hashes(tokens, hashes);
  ASSERT_EQ(cache.count_hits(hashes), 2);
  std::vector<BlockId> shared = cache.acquire(hashes, 2);
  EXPECT_EQ(shared, std::vector<BlockId>(donor.begin(), donor.begin() + 2));
  EXPECT_EQ(pool.ref_count(donor[0]), 2);
  EXPECT_EQ(pool.ref_count(donor[2]), 1);        // untouched
  EXPECT_EQ(cache.count_hits(donor_hashes), 3);  // the donor's entry is intact

  // Releasing both users leaves the blocks cached and idle, not free.
  for (BlockId id : shared) cache.release(id);
  for (BlockId id : donor) cache.release(id);
  EXPECT_EQ(cache.num_idle(), 3);
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_EQ(cache.count_hits(donor_hashes), 3);
  // A hit revives idle blocks (they leave the eviction order).
  std::vector<BlockId> again = cache.acquire(donor_hashes, 3);
  EXPECT_EQ(again, donor);
  EXPECT_EQ(cache.num_idle(), 0);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedIdleBlockOnlyWhenFreeListIsEmpty) {
  BlockPool pool(3);
  PrefixCache cache(pool, {.block_size = 2});
  std::vector<uint64_t> ha, hb;
  cache.extend_hashes(std::vector<int32_t>{1, 1}, ha);
  cache.extend_hashes(std::vector<int32_t>{2, 2}, hb);
  BlockId a = compute_blocks(cache, ha, 1)[0];
  BlockId b = compute_blocks(cache, hb, 1)[0];
  cache.release(a);  // a idle first: least recently used
  cache.release(b);
  BlockId fresh = *cache.allocate();  // from the free list: nothing evicted
  EXPECT_NE(fresh, a);
  EXPECT_NE(fresh, b);
  EXPECT_EQ(cache.evictions(), 0);
  BlockId reused = *cache.allocate();  // now evicts a
  EXPECT_EQ(reused, a);
  EXPECT_EQ(cache.count_hits(ha), 0);
  EXPECT_EQ(cache.count_hits(hb), 1);
  EXPECT_EQ(cache.evictions(), 1);
  EXPECT_FALSE(cache.is_named(a));
  EXPECT_EQ(*cache.allocate(), b);
  EXPECT_FALSE(cache.allocate().has_value());  // everything referenced
}

TEST(PrefixCache, IdleCapAndDisabledCache) {
  BlockPool pool(4);
  PrefixCache capped(pool, {.block_size = 1, .max_idle_blocks = 1});
  std::vector<uint64_t> hashes;
  capped.extend_hashes(std::vector<int32_t>{5, 6}, hashes);
  std::vector<BlockId> table = compute_blocks(capped, hashes, 2);
  capped.release(table[1]);
  capped.release(table[0]);  // over the cap of 1: table[1] (older idle) is evicted
  EXPECT_EQ(capped.num_idle(), 1);
  EXPECT_TRUE(capped.is_named(table[0]));
  EXPECT_FALSE(capped.is_named(table[1]));
  EXPECT_EQ(pool.num_free(), 3);

  BlockPool pool2(2);
  PrefixCache off(pool2, {.block_size = 1, .max_idle_blocks = 0});
  BlockId id = *off.allocate();
  off.publish(id, 42);
  EXPECT_FALSE(off.is_named(id));
  EXPECT_EQ(off.count_hits(std::vector<uint64_t>{42}), 0);
  off.release(id);
  EXPECT_EQ(pool2.num_free(), 2);
}

TEST(PrefixCache, DuplicatePublishKeepsTheFirstBlock) {
  BlockPool pool(2);
  PrefixCache cache(pool, {.block_size = 1});
  BlockId a = *cache.allocate();
  BlockId b = *cache.allocate();
  cache.publish(a, 9);
  cache.publish(b, 9);  // computed the same content concurrently
  EXPECT_TRUE(cache.is_named(a));
  EXPECT_FALSE(cache.is_named(b));
  cache.release(b);
  EXPECT_TRUE(pool.is_free(b));
  EXPECT_EQ(cache.acquire(std::vector<uint64_t>{9}, 1)[0], a);
}

}  // namespace
}  // namespace hearth::kv
