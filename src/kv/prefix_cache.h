// PrefixCache: names full KV blocks by a hash chained over (parent hash, the block's token
// ids, namespace) so a new request can reuse the longest already-computed prefix. Blocks
// are shared by reference count (a hit never consumes the donor); a block whose count
// drops to zero stays cached, idle, until evicted least-recently-used.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace hearth::kv {

struct PrefixCacheOptions {
  int block_size = 16;
  // Model fingerprint + adapter + KV scheme, hashed: blocks of different namespaces never
  // match, even for identical tokens.
  uint64_t namespace_hash = 0;
  // Cap on idle (zero-reference) cached blocks: -1 = no cap beyond the pool, 0 = the cache
  // is disabled (nothing is named, nothing is found).
  int64_t max_idle_blocks = -1;
};

// The allocator front for the scheduler: fresh blocks come from the pool's free list, then
// from evicting the least-recently-used idle cached block.
class PrefixCache {
 public:
  PrefixCache(BlockPool& pool, const PrefixCacheOptions& options);

  bool enabled() const { return options_.max_idle_blocks != 0; }
  int block_size() const { return options_.block_size; }

  // hash(parent, tokens of one full block, namespace), with xxh3.
  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> block_tokens,
                             uint64_t namespace_hash);
  // Appends the hashes of the full blocks of `tokens` that `hashes` does not cover yet.
  void extend_hashes(std::span<const int32_t> tokens, std::vector<uint64_t>& hashes) const;

  // How many leading blocks of `hashes` are cached (0 when disabled).
  int count_hits(std::span<const uint64_t> hashes) const;
  // Takes a reference on each of the first `count` blocks, all of which must be cached
  // (count <= count_hits); revived idle blocks leave the eviction order.
  std::vector<BlockId> acquire(std::span<const uint64_t> hashes, int count);

  // A fresh, unnamed block with one reference; nullopt when nothing is free or evictable.
  std::optional<BlockId> allocate();
  // Names a full, computed block. If the hash is already cached by another block, this
  // block stays unnamed (it is freed on release) and the existing entry wins.
  void publish(BlockId id, uint64_t hash);
  // Drops one reference; at zero a named block goes idle (most recently used end), an
  // unnamed one back to the pool.
  void release(BlockId id);

  // Blocks an allocation could get now: free plus idle cached.
  int num_allocatable() const { return pool_.num_free() + static_cast<int>(idle_.size()); }
  int num_cached() const { return static_cast<int>(by_hash_.size()); }
  int num_idle() const { return static_cast<int>(idle_.size()); }
  int num_used() const { return pool_.num_blocks() - num_allocatable(); }
  bool is_named(BlockId id) const { return named_[id]; }
  int64_t evictions() const { return evictions_; }

 private:
  void evict_lru();

  BlockPool& pool_;
  PrefixCacheOptions options_;
  std::unordered_map<uint64_t, BlockId> by_hash_;
  std::vector<uint64_t> hash_of_;                       // [num_blocks], valid where named_
  std::vector<bool> named_;                             // [num_blocks]
  std::list<BlockId> idle_;                             // least recently used first
  std::vector<std::list<BlockId>::iterator> idle_pos_;  // [num_blocks], valid when idle
  std::vector<bool> is_idle_;                           // [num_blocks]
  int64_t evictions_ = 0;
};

}  // namespace hearth::kv
