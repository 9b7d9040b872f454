// Encode: added tokens -> normalize -> added tokens (normalized) -> pre-tokenize -> model
// -> post-process. Decode: ids -> token strings -> decoder chain.
#include "text/tokenizer.h"

#include "text/tokenizer_impl.h"
#include "text/utf8.h"

namespace hearth::text {

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text,
                                               bool add_special_tokens) const {
  if (size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) {
    return invalid_argument_error("text to encode is not valid UTF-8 (bad byte at offset {})", bad);
  }
  const Impl& im = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<AddedSplit> raw_splits, norm_splits;
  std::vector<Piece> pieces;
  std::string normalized;
  im.added.split(text, false, raw_splits);
  for (const AddedSplit& raw : raw_splits) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    normalized.assign(text.substr(raw.start, raw.end - raw.start));
    if (im.normalizer) HEARTH_RETURN_IF_ERROR(im.normalizer->normalize(normalized));
    norm_splits.clear();
    im.added.split(normalized, true, norm_splits);
    for (const AddedSplit& part : norm_splits) {
      if (part.id >= 0) {
        ids.push_back(part.id);
        continue;
      }
      pieces.clear();
      pieces.push_back({normalized.substr(part.start, part.end - part.start),
                        raw.start == 0 && part.start == 0});
      if (im.pre_tokenizer) HEARTH_RETURN_IF_ERROR(im.pre_tokenizer->pre_tokenize(pieces));
      for (const Piece& p : pieces) im.model->tokenize(p.text, ids);
    }
  }
  if (im.post_processor) im.post_processor->process(ids, add_special_tokens);
  return ids;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids,
                                      bool skip_special_tokens) const {
  const Impl& im = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= im.vocab_size) continue;  // no token: nothing, as the reference does
    if (skip_special_tokens && im.special[id]) continue;
    if (const AddedToken* added = im.added.find_id(id)) {
      tokens.push_back(added->content);
    } else if (const std::string* token = im.model->id_to_token(id)) {
      tokens.push_back(*token);
    }  // an id with no token (a hole in the vocabulary) decodes to nothing
  }
  std::string out;
  if (im.decoder) {
    HEARTH_RETURN_IF_ERROR(im.decoder->decode_chain(tokens));
    for (const std::string& t : tokens) out += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
  }
  return out;
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
std::vector<int32_t> Tokenizer::eos_ids() const { return impl_->eos_ids; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.find_content(token)) return id;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* added = impl_->added.find_id(id)) return added->content;
  if (const std::string* token = impl_->model->id_to_token(id)) return *token;
  return std::string();
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->vocab_size && impl_->special[id];
}

}  // namespace hearth::text
