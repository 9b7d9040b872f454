// The parts of a loaded tokenizer, shared by the loader (tokenizer_load.cpp) and the
// encode/decode paths (tokenizer.cpp). Internal to the text layer.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "text/added_vocab.h"
#include "text/decoder.h"
#include "text/model.h"
#include "text/normalizer.h"
#include "text/post_processor.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"

namespace hearth::text {

struct Tokenizer::Impl {
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null: the whole text is one word
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;  // may be null
  std::unique_ptr<Decoder> decoder;               // may be null: tokens joined by spaces
  AddedVocab added;
  std::vector<bool> special;  // [vocab_size] id's token string is a special added token
  int32_t vocab_size = 0;
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;
};

}  // namespace hearth::text
