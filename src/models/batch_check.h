// Validation of a ForwardBatch against a model's vocabulary and KV pool, shared by every
// backend's forward(): a malformed batch is an error before any kernel reads through it.
#pragma once

#include "base/status.h"
#include "models/model.h"

namespace hearth {

// Checks token ids, positions, sequence slices (in range, disjoint, covering every token),
// block tables (long enough, ids inside the pool) and logit rows.
Status validate_forward_batch(const ForwardBatch& batch, int vocab_size, int num_blocks,
                              int block_size);

}  // namespace hearth
