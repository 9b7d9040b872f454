// PrefixCache: chained hashing (namespace and every earlier token matter), longest-prefix
// lookup, sharing without consuming the donor, LRU eviction of idle blocks and the cap, and
// forced hash collisions (truncated names) that must never turn into a wrong hit.
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

// Fills `count` blocks for `tokens` (as a request computing them would), publishes each
// after its parent, returns the block table; `serials` gets what publish returned.
std::vector<BlockId> compute_blocks(PrefixCache& cache, std::span<const int32_t> tokens,
                                    const std::vector<uint64_t>& hashes, int count,
                                    std::vector<uint64_t>* serials = nullptr) {
  std::vector<BlockId> table;
  uint64_t parent = PrefixCache::kRoot;
  const size_t bs = static_cast<size_t>(cache.block_size());
  for (int i = 0; i < count; ++i) {
    BlockId id = *cache.allocate();
    parent = cache.publish(id, hashes[i], tokens.subspan(static_cast<size_t>(i) * bs, bs), parent);
    if (serials != nullptr) serials->push_back(parent);
    table.push_back(id);
  }
  return table;
}

TEST(PrefixCache, LongestPrefixSharedWithoutConsumingTheDonor) {
  BlockPool pool(8);
  PrefixCache cache(pool, {.block_size = 4});
  std::vector<uint64_t> donor_hashes;
  std::vector<int32_t> donor_tokens = iota_tokens(12);
  cache.extend_hashes(donor_tokens, donor_hashes);
  std::vector<BlockId> donor = compute_blocks(cache, donor_tokens, donor_hashes, 3);

  // Same first 8 tokens, different third block.
  std::vector<int32_t> tokens = iota_tokens(8);
  for (int32_t t : {100, 101, 102, 103}) tokens.push_back(t);
  std::vector<uint64_t> hashes;
  cache.extend_hashes(tokens, hashes);
  ASSERT_EQ(cache.count_hits(tokens, hashes), 2);
  std::vector<uint64_t> serials;
  std::vector<BlockId> shared = cache.acquire(tokens, hashes, 2, serials);
  EXPECT_EQ(shared, std::vector<BlockId>(donor.begin(), donor.begin() + 2));
  EXPECT_EQ(serials, (std::vector<uint64_t>{cache.serial(donor[0]), cache.serial(donor[1])}));
  EXPECT_EQ(pool.ref_count(donor[0]), 2);
  EXPECT_EQ(pool.ref_count(donor[2]), 1);                      // untouched
  EXPECT_EQ(cache.count_hits(donor_tokens, donor_hashes), 3);  // the donor's entry is intact

  // Releasing both users leaves the blocks cached and idle, not free.
  for (BlockId id : shared) cache.release(id);
  for (BlockId id : donor) cache.release(id);
  EXPECT_EQ(cache.num_idle(), 3);
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_EQ(cache.count_hits(donor_tokens, donor_hashes), 3);
  // A hit revives idle blocks (they leave the eviction order).
  serials.clear();
  std::vector<BlockId> again = cache.acquire(donor_tokens, donor_hashes, 3, serials);
  EXPECT_EQ(again, donor);
  EXPECT_EQ(cache.num_idle(), 0);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedIdleBlockOnlyWhenFreeListIsEmpty) {
  BlockPool pool(3);
  PrefixCache cache(pool, {.block_size = 2});
  std::vector<uint64_t> ha, hb;
  const std::vector<int32_t> ta = {1, 1}, tb = {2, 2};
  cache.extend_hashes(ta, ha);
  cache.extend_hashes(tb, hb);
  BlockId a = compute_blocks(cache, ta, ha, 1)[0];
  BlockId b = compute_blocks(cache, tb, hb, 1)[0];
  cache.release(a);  // a idle first: least recently used
  cache.release(b);
  BlockId fresh = *cache.allocate();  // from the free list: nothing evicted
  EXPECT_NE(fresh, a);
  EXPECT_NE(fresh, b);
  EXPECT_EQ(cache.evictions(), 0);
  BlockId reused = *cache.allocate();  // now evicts a
  EXPECT_EQ(reused, a);
  EXPECT_EQ(cache.count_hits(ta, ha), 0);
  EXPECT_EQ(cache.count_hits(tb, hb), 1);
  EXPECT_EQ(cache.evictions(), 1);
  EXPECT_FALSE(cache.is_named(a));
  EXPECT_EQ(*cache.allocate(), b);
  EXPECT_FALSE(cache.allocate().has_value());  // everything referenced
}

TEST(PrefixCache, IdleCapAndDisabledCache) {
  BlockPool pool(4);
  PrefixCache capped(pool, {.block_size = 1, .max_idle_blocks = 1});
  std::vector<uint64_t> hashes;
  const std::vector<int32_t> tokens = {5, 6};
  capped.extend_hashes(tokens, hashes);
  std::vector<BlockId> table = compute_blocks(capped, tokens, hashes, 2);
  capped.release(table[1]);
  capped.release(table[0]);  // over the cap of 1: table[1] (older idle) is evicted
  EXPECT_EQ(capped.num_idle(), 1);
  EXPECT_TRUE(capped.is_named(table[0]));
  EXPECT_FALSE(capped.is_named(table[1]));
  EXPECT_EQ(pool.num_free(), 3);

  BlockPool pool2(2);
  PrefixCache off(pool2, {.block_size = 1, .max_idle_blocks = 0});
  BlockId id = *off.allocate();
  const std::vector<int32_t> one = {3};
  EXPECT_EQ(off.publish(id, 42, one, PrefixCache::kRoot), PrefixCache::kNoEntry);
  EXPECT_FALSE(off.is_named(id));
  EXPECT_EQ(off.count_hits(one, std::vector<uint64_t>{42}), 0);
  off.release(id);
  EXPECT_EQ(pool2.num_free(), 2);
}

TEST(PrefixCache, DuplicatePublishKeepsTheFirstBlock) {
  BlockPool pool(2);
  PrefixCache cache(pool, {.block_size = 1});
  BlockId a = *cache.allocate();
  BlockId b = *cache.allocate();
  const std::vector<int32_t> t = {4};
  uint64_t sa = cache.publish(a, 9, t, PrefixCache::kRoot);
  // Computed the same content concurrently: known under the first block's serial.
  EXPECT_EQ(cache.publish(b, 9, t, PrefixCache::kRoot), sa);
  EXPECT_TRUE(cache.is_named(a));
  EXPECT_FALSE(cache.is_named(b));
  cache.release(b);
  EXPECT_TRUE(pool.is_free(b));
  std::vector<uint64_t> serials;
  EXPECT_EQ(cache.acquire(t, std::vector<uint64_t>{9}, 1, serials)[0], a);
  EXPECT_EQ(serials, std::vector<uint64_t>{sa});
}

// Every block name truncated to 0 bits: all blocks collide. Only the first content is
// cached; everything else misses (and cannot be published) instead of being served.
TEST(PrefixCacheCollision, AllNamesEqualNeverServesOtherTokens) {
  BlockPool pool(8);
  PrefixCache cache(pool, {.block_size = 2, .hash_bits = 0});
  const std::vector<int32_t> first = {1, 2, 3, 4};
  std::vector<uint64_t> h1;
  cache.extend_hashes(first, h1);
  ASSERT_EQ(h1, (std::vector<uint64_t>{0, 0}));
  std::vector<uint64_t> s1;
  std::vector<BlockId> t1 = compute_blocks(cache, first, h1, 2, &s1);
  // Block 1 collides with block 0's entry (other tokens): not cached.
  EXPECT_NE(s1[0], PrefixCache::kNoEntry);
  EXPECT_EQ(s1[1], PrefixCache::kNoEntry);
  EXPECT_TRUE(cache.is_named(t1[0]));
  EXPECT_FALSE(cache.is_named(t1[1]));

  const std::vector<int32_t> other = {7, 8, 1, 2};  // same names, other tokens
  std::vector<uint64_t> h2;
  cache.extend_hashes(other, h2);
  EXPECT_EQ(h2, h1);
  EXPECT_EQ(cache.count_hits(other, h2), 0);
  EXPECT_EQ(cache.count_hits(first, h1), 1);
  // A block whose parent has no entry is never published.
  BlockId orphan = *cache.allocate();
  EXPECT_EQ(cache.publish(orphan, 0, std::span(first).first(2), PrefixCache::kNoEntry),
            PrefixCache::kNoEntry);
  EXPECT_FALSE(cache.is_named(orphan));
}

// The entry under a name holds the right tokens but after another prefix: a parent whose
// entry was evicted and whose name was then taken by colliding content. The child must miss.
TEST(PrefixCacheCollision, SameTokensAfterAnotherPrefixMiss) {
  BlockPool pool(3);
  PrefixCache cache(pool, {.block_size = 1, .hash_bits = 1});
  // Find x and y whose one-bit first-block names collide: with one bit, two of any three
  // distinct tokens share a name.
  std::vector<uint64_t> name(3);
  for (int32_t t = 0; t < 3; ++t) {
    std::vector<uint64_t> h;
    cache.extend_hashes(std::vector<int32_t>{t}, h);
    name[t] = h[0];
  }
  int32_t x = 0, y = 1;
  if (name[0] != name[1]) (name[0] == name[2] ? y : x) = 2;
  ASSERT_NE(x, y);

  const std::vector<int32_t> xz = {x, 9}, yz = {y, 9};
  std::vector<uint64_t> hx, hy;
  cache.extend_hashes(xz, hx);
  cache.extend_hashes(yz, hy);
  ASSERT_EQ(hx, hy);  // equal first names, so equal chained second names too
  std::vector<BlockId> tx = compute_blocks(cache, xz, hx, 2);
  ASSERT_TRUE(cache.is_named(tx[1]));
  cache.release(tx[0]);  // the parent idles first: it is the LRU one
  cache.release(tx[1]);
  BlockId taken = *cache.allocate();    // from the free list
  BlockId evicted = *cache.allocate();  // evicts x's block
  EXPECT_EQ(evicted, tx[0]);
  // y takes the free name of block 0; z after y must not hit z-after-x.
  std::span<const int32_t> y_block = std::span(yz).first(1);
  uint64_t sy = cache.publish(evicted, hy[0], y_block, PrefixCache::kRoot);
  ASSERT_NE(sy, PrefixCache::kNoEntry);
  EXPECT_EQ(cache.count_hits(yz, hy), 1);
  EXPECT_EQ(cache.count_hits(xz, hx), 0);
  EXPECT_EQ(cache.publish(taken, hy[1], std::span(yz).subspan(1), sy), PrefixCache::kNoEntry);
}

}  // namespace
}  // namespace hearth::kv
