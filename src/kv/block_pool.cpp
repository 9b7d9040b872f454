// BlockPool: reference counting with checks that turn a double free or a use of a free
// block into an immediate, located failure instead of silent KV corruption.
#include "kv/block_pool.h"

#include "base/check.h"

namespace hearth::kv {

BlockPool::BlockPool(int num_blocks)
    : refs_(static_cast<size_t>(num_blocks), 0),
      on_free_list_(static_cast<size_t>(num_blocks), true) {
  HEARTH_CHECK(num_blocks >= 0, "negative block count {}", num_blocks);
  free_.reserve(static_cast<size_t>(num_blocks));
  // Highest id at the bottom, so allocation hands out 0, 1, 2, ... on a fresh pool.
  for (BlockId id = num_blocks - 1; id >= 0; --id) free_.push_back(id);
}

void BlockPool::check_id(BlockId id) const {
  HEARTH_CHECK(id >= 0 && id < num_blocks(), "block id {} outside the pool of {}", id,
               num_blocks());
}

std::optional<BlockId> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  BlockId id = free_.back();
  free_.pop_back();
  on_free_list_[id] = false;
  refs_[id] = 1;
  return id;
}

void BlockPool::retain(BlockId id) {
  check_id(id);
  HEARTH_CHECK(!on_free_list_[id], "retaining free block {}", id);
  ++refs_[id];
}

int BlockPool::release(BlockId id) {
  check_id(id);
  HEARTH_CHECK(refs_[id] > 0, "releasing block {} with no references (double free)", id);
  return --refs_[id];
}

void BlockPool::free(BlockId id) {
  check_id(id);
  HEARTH_CHECK(refs_[id] == 0, "freeing block {} with {} references", id, refs_[id]);
  HEARTH_CHECK(!on_free_list_[id], "block {} freed twice", id);
  on_free_list_[id] = true;
  free_.push_back(id);
}

int BlockPool::ref_count(BlockId id) const {
  check_id(id);
  return refs_[id];
}

bool BlockPool::is_free(BlockId id) const {
  check_id(id);
  return on_free_list_[id];
}

}  // namespace hearth::kv
