// Post-processors (tokenizer.json "post_processor"): add the special tokens a model expects
// around an encoded sequence (BOS/EOS, CLS/SEP) when add_special_tokens is set.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"

namespace hearth::text {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Rewrites the ids of one single (unpaired) sequence.
  virtual void process(std::vector<int32_t>& ids, bool add_special_tokens) const = 0;
};

// Builds the post-processor described by `config`. An unknown type is an error naming it.
Result<std::unique_ptr<PostProcessor>> make_post_processor(const nlohmann::json& config);

}  // namespace hearth::text
