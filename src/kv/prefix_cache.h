// PrefixCache: names full KV blocks by a hash chained over (parent hash, the block's token
// ids, namespace) so a new request can reuse the longest already-computed prefix. Blocks
// are shared by reference count (a hit never consumes the donor); a block whose count
// drops to zero stays cached, idle, until evicted least-recently-used. A hash is only an
// index: a hit is confirmed against the block's stored tokens and parent entry, so a 64-bit
// collision can never hand out KV computed for other tokens.
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
  // Bits of each block name kept (64 in production). Test seam: a low value forces hash
  // collisions, which must cost cache hits and never correctness.
  int hash_bits = 64;
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

  // Every cached block carries a serial, unique over the cache's life, and the serial of the
  // entry before it in its chain (kRoot for a first block). An entry with serial s therefore
  // stands for one exact token prefix, even after its parent entry is gone.
  static constexpr uint64_t kRoot = 0;
  // "This block's content has no cache entry": after a collision, or with the cache off.
  static constexpr uint64_t kNoEntry = ~uint64_t{0};

  // How many leading full blocks of `tokens` (hashes from extend_hashes) are cached with
  // exactly these tokens after exactly this prefix: a lookup stops at the first missing
  // hash, or at an entry whose tokens or parent differ (a collision). 0 when disabled.
  int count_hits(std::span<const int32_t> tokens, std::span<const uint64_t> hashes) const;
  // Takes a reference on each of the first `count` blocks, which must all be hits
  // (count <= count_hits, re-checked); revived idle blocks leave the eviction order. Appends
  // each block's serial to `serials`.
  std::vector<BlockId> acquire(std::span<const int32_t> tokens, std::span<const uint64_t> hashes,
                               int count, std::vector<uint64_t>& serials);

  // A fresh, unnamed block with one reference; nullopt when nothing is free or evictable.
  std::optional<BlockId> allocate();
  // Names a full, computed block holding `block_tokens` ([block_size]) after the prefix whose
  // entry has serial `parent` (kRoot for a sequence's first block). Returns the serial this
  // content is cached under: the block's new serial; or, when an entry with the same tokens
  // and parent already exists, that entry's (the existing entry wins, this block stays
  // unnamed and is freed on release); or kNoEntry when the hash belongs to other content,
  // `parent` is kNoEntry, or the cache is disabled.
  uint64_t publish(BlockId id, uint64_t hash, std::span<const int32_t> block_tokens,
                   uint64_t parent);
  // Drops one reference; at zero a named block goes idle (most recently used end), an
  // unnamed one back to the pool.
  void release(BlockId id);

  // Blocks an allocation could get now: free plus idle cached.
  int num_allocatable() const { return pool_.num_free() + static_cast<int>(idle_.size()); }
  int num_cached() const { return static_cast<int>(by_hash_.size()); }
  int num_idle() const { return static_cast<int>(idle_.size()); }
  int num_used() const { return pool_.num_blocks() - num_allocatable(); }
  bool is_named(BlockId id) const { return named_[id]; }
  uint64_t serial(BlockId id) const { return serial_[id]; }  // valid where named
  int64_t evictions() const { return evictions_; }

 private:
  void evict_lru();
  // The entry of `hash` if it holds `block_tokens` after `parent`; -1 otherwise.
  BlockId find(uint64_t hash, std::span<const int32_t> block_tokens, uint64_t parent) const;

  BlockPool& pool_;
  PrefixCacheOptions options_;
  std::unordered_map<uint64_t, BlockId> by_hash_;
  std::vector<uint64_t> hash_of_;        // [num_blocks], valid where named_
  std::vector<bool> named_;              // [num_blocks]
  std::vector<uint64_t> serial_;         // [num_blocks], valid where named_
  std::vector<uint64_t> parent_serial_;  // [num_blocks], valid where named_
  std::vector<int32_t> tokens_;          // [num_blocks, block_size], where named_
  uint64_t next_serial_ = kRoot + 1;
  std::list<BlockId> idle_;                             // least recently used first
  std::vector<std::list<BlockId>::iterator> idle_pos_;  // [num_blocks], valid when idle
  std::vector<bool> is_idle_;                           // [num_blocks]
  int64_t evictions_ = 0;
};

}  // namespace hearth::kv
