// BlockPool: the fixed set of KV block ids carved from the memory budget at startup, with
// a reference count per block. It only counts; which block holds what (and which idle
// blocks stay cached) is the PrefixCache's business.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace hearth::kv {

using BlockId = int32_t;

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(refs_.size()); }
  // Blocks on the free list (not referenced, not retained by a cache).
  int num_free() const { return static_cast<int>(free_.size()); }

  // Takes a block off the free list with one reference; nullopt when the list is empty.
  std::optional<BlockId> allocate();
  // Adds a reference. A block with zero references that is not free (retained by a cache)
  // may be revived this way; a free block may not.
  void retain(BlockId id);
  // Drops one reference and returns the count left. At zero the block is neither free nor
  // referenced: the caller either keeps it (cache) or calls free().
  int release(BlockId id);
  // Puts a zero-reference, non-free block back on the free list.
  void free(BlockId id);

  int ref_count(BlockId id) const;
  bool is_free(BlockId id) const;

 private:
  void check_id(BlockId id) const;

  std::vector<int32_t> refs_;       // [num_blocks]
  std::vector<bool> on_free_list_;  // [num_blocks]
  std::vector<BlockId> free_;       // LIFO: recently freed blocks are reused first (warm pages)
};

}  // namespace hearth::kv
