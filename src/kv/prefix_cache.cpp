// PrefixCache: the hash chain makes a block's name depend on every token before it, so
// equal names mean equal prefixes (up to a 64-bit collision) and a lookup is a walk down
// the chain that stops at the first miss.
#include "kv/prefix_cache.h"

#include <cstring>

#include "base/check.h"
#include "base/hash.h"

namespace hearth::kv {

PrefixCache::PrefixCache(BlockPool& pool, const PrefixCacheOptions& options)
    : pool_(pool),
      options_(options),
      hash_of_(static_cast<size_t>(pool.num_blocks()), 0),
      named_(static_cast<size_t>(pool.num_blocks()), false),
      idle_pos_(static_cast<size_t>(pool.num_blocks())),
      is_idle_(static_cast<size_t>(pool.num_blocks()), false) {
  HEARTH_CHECK(options.block_size > 0, "block size {}", options.block_size);
}

uint64_t PrefixCache::chain_hash(uint64_t parent, std::span<const int32_t> block_tokens,
                                 uint64_t namespace_hash) {
  // [parent u64][namespace u64][token ids as little-endian int32...]
  std::vector<uint8_t> bytes(16 + block_tokens.size_bytes());
  std::memcpy(bytes.data(), &parent, 8);
  std::memcpy(bytes.data() + 8, &namespace_hash, 8);
  std::memcpy(bytes.data() + 16, block_tokens.data(), block_tokens.size_bytes());
  return xxh3_64(bytes);
}

void PrefixCache::extend_hashes(std::span<const int32_t> tokens,
                                std::vector<uint64_t>& hashes) const {
  size_t bs = static_cast<size_t>(options_.block_size);
  for (size_t b = hashes.size(); (b + 1) * bs <= tokens.size(); ++b) {
    uint64_t parent = b == 0 ? 0 : hashes[b - 1];
    hashes.push_back(chain_hash(parent, tokens.subspan(b * bs, bs), options_.namespace_hash));
  }
}

int PrefixCache::count_hits(std::span<const uint64_t> hashes) const {
  if (!enabled()) return 0;
  int hits = 0;
  for (uint64_t h : hashes) {
    if (!by_hash_.contains(h)) break;
    ++hits;
  }
  return hits;
}

std::vector<BlockId> PrefixCache::acquire(std::span<const uint64_t> hashes, int count) {
  std::vector<BlockId> blocks;
  blocks.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    auto it = by_hash_.find(hashes[i]);
    HEARTH_CHECK(it != by_hash_.end(), "acquiring uncached block {} of the prefix", i);
    BlockId id = it->second;
    if (is_idle_[id]) {
      idle_.erase(idle_pos_[id]);
      is_idle_[id] = false;
    }
    pool_.retain(id);
    blocks.push_back(id);
  }
  return blocks;
}

void PrefixCache::evict_lru() {
  BlockId id = idle_.front();
  idle_.pop_front();
  is_idle_[id] = false;
  by_hash_.erase(hash_of_[id]);
  named_[id] = false;
  pool_.free(id);
  ++evictions_;
}

std::optional<BlockId> PrefixCache::allocate() {
  if (pool_.num_free() == 0 && !idle_.empty()) evict_lru();
  return pool_.allocate();
}

void PrefixCache::publish(BlockId id, uint64_t hash) {
  HEARTH_CHECK(pool_.ref_count(id) > 0, "publishing unreferenced block {}", id);
  if (!enabled() || named_[id] || by_hash_.contains(hash)) return;
  by_hash_.emplace(hash, id);
  hash_of_[id] = hash;
  named_[id] = true;
}

void PrefixCache::release(BlockId id) {
  if (pool_.release(id) > 0) return;
  if (!named_[id]) {
    pool_.free(id);
    return;
  }
  idle_.push_back(id);
  idle_pos_[id] = std::prev(idle_.end());
  is_idle_[id] = true;
  if (options_.max_idle_blocks >= 0 &&
      static_cast<int64_t>(idle_.size()) > options_.max_idle_blocks) {
    evict_lru();
  }
}

}  // namespace hearth::kv
