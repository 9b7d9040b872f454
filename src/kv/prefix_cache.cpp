// PrefixCache: the hash chain makes a block's name depend on every token before it, so a
// lookup is a walk down the chain that stops at the first miss. Equal names only suggest
// equal prefixes: each step of the walk compares the block's stored tokens and its parent's
// serial before it counts as a hit.
#include "kv/prefix_cache.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/hash.h"

namespace hearth::kv {

PrefixCache::PrefixCache(BlockPool& pool, const PrefixCacheOptions& options)
    : pool_(pool),
      options_(options),
      hash_of_(static_cast<size_t>(pool.num_blocks()), 0),
      named_(static_cast<size_t>(pool.num_blocks()), false),
      serial_(static_cast<size_t>(pool.num_blocks()), kNoEntry),
      parent_serial_(static_cast<size_t>(pool.num_blocks()), kNoEntry),
      tokens_(static_cast<size_t>(pool.num_blocks()) * static_cast<size_t>(options.block_size)),
      idle_pos_(static_cast<size_t>(pool.num_blocks())),
      is_idle_(static_cast<size_t>(pool.num_blocks()), false) {
  HEARTH_CHECK(options.block_size > 0, "block size {}", options.block_size);
  HEARTH_CHECK(options.hash_bits >= 0 && options.hash_bits <= 64, "hash bits {}",
               options.hash_bits);
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
  uint64_t mask = options_.hash_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << options_.hash_bits) - 1;
  for (size_t b = hashes.size(); (b + 1) * bs <= tokens.size(); ++b) {
    uint64_t parent = b == 0 ? 0 : hashes[b - 1];
    hashes.push_back(chain_hash(parent, tokens.subspan(b * bs, bs), options_.namespace_hash) &
                     mask);
  }
}

BlockId PrefixCache::find(uint64_t hash, std::span<const int32_t> block_tokens,
                          uint64_t parent) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  BlockId id = it->second;
  if (parent_serial_[id] != parent) return -1;
  const int32_t* stored =
      &tokens_[static_cast<size_t>(id) * static_cast<size_t>(options_.block_size)];
  return std::equal(block_tokens.begin(), block_tokens.end(), stored) ? id : -1;
}

int PrefixCache::count_hits(std::span<const int32_t> tokens,
                            std::span<const uint64_t> hashes) const {
  if (!enabled()) return 0;
  const size_t bs = static_cast<size_t>(options_.block_size);
  HEARTH_CHECK(hashes.size() * bs <= tokens.size(), "more block hashes than full blocks");
  uint64_t parent = kRoot;
  int hits = 0;
  for (size_t b = 0; b < hashes.size(); ++b) {
    BlockId id = find(hashes[b], tokens.subspan(b * bs, bs), parent);
    if (id < 0) break;
    parent = serial_[id];
    ++hits;
  }
  return hits;
}

std::vector<BlockId> PrefixCache::acquire(std::span<const int32_t> tokens,
                                          std::span<const uint64_t> hashes, int count,
                                          std::vector<uint64_t>& serials) {
  const size_t bs = static_cast<size_t>(options_.block_size);
  HEARTH_CHECK(static_cast<size_t>(count) <= hashes.size() &&
                   static_cast<size_t>(count) * bs <= tokens.size(),
               "acquiring {} blocks of a {}-token prefix", count, tokens.size());
  std::vector<BlockId> blocks;
  blocks.reserve(static_cast<size_t>(count));
  uint64_t parent = kRoot;
  for (int i = 0; i < count; ++i) {
    BlockId id = find(hashes[i], tokens.subspan(static_cast<size_t>(i) * bs, bs), parent);
    HEARTH_CHECK(id >= 0, "acquiring uncached block {} of the prefix", i);
    parent = serial_[id];
    serials.push_back(parent);
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
  serial_[id] = kNoEntry;
  parent_serial_[id] = kNoEntry;
  pool_.free(id);
  ++evictions_;
}

std::optional<BlockId> PrefixCache::allocate() {
  if (pool_.num_free() == 0 && !idle_.empty()) evict_lru();
  return pool_.allocate();
}

uint64_t PrefixCache::publish(BlockId id, uint64_t hash, std::span<const int32_t> block_tokens,
                              uint64_t parent) {
  HEARTH_CHECK(pool_.ref_count(id) > 0, "publishing unreferenced block {}", id);
  HEARTH_CHECK(block_tokens.size() == static_cast<size_t>(options_.block_size),
               "publishing {} tokens as a block of {}", block_tokens.size(), options_.block_size);
  if (!enabled() || parent == kNoEntry) return kNoEntry;
  if (named_[id]) {  // already cached (a hit, or published before): must be this content
    HEARTH_CHECK(hash_of_[id] == hash && parent_serial_[id] == parent,
                 "block {} republished under another name", id);
    return serial_[id];
  }
  if (by_hash_.contains(hash)) {
    BlockId existing = find(hash, block_tokens, parent);
    return existing >= 0 ? serial_[existing] : kNoEntry;  // same content, or a collision
  }
  by_hash_.emplace(hash, id);
  hash_of_[id] = hash;
  named_[id] = true;
  serial_[id] = next_serial_++;
  parent_serial_[id] = parent;
  std::copy(block_tokens.begin(), block_tokens.end(),
            tokens_.begin() + static_cast<ptrdiff_t>(id) * options_.block_size);
  return serial_[id];
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
