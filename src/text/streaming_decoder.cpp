// Sliding-window incremental decode. The window always starts at a boundary whose prefix
// decodes to non-empty text without U+FFFD, so start-of-text effects of the decoders (Strip,
// Metaspace's first token) cancel between the prefix and the window.
#include "text/streaming_decoder.h"

#include <span>

namespace hearth::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool ends_with_replacement(const std::string& s) {
  return s.size() >= kReplacement.size() &&
         s.compare(s.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
}

}  // namespace

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamingDecoder::decode_range(size_t begin, size_t end) const {
  auto text = tokenizer_->decode(std::span<const int32_t>(ids_).subspan(begin, end - begin),
                                 skip_special_tokens_);
  return text.ok() ? std::move(*text) : std::string();  // ids are range-checked on push
}

std::string StreamingDecoder::emit(bool force) {
  if (read_ == ids_.size()) return std::string();
  std::string text = decode_range(window_start_, ids_.size());
  bool extends = text.compare(0, prefix_text_.size(), prefix_text_) == 0;
  bool pending_char = ends_with_replacement(text);
  if (!force && (!extends || pending_char) && ids_.size() - read_ < kMaxPending) {
    return std::string();
  }
  size_t common = 0;
  if (extends) {
    common = prefix_text_.size();
  } else {  // gave up waiting: release what differs after the common prefix
    while (common < text.size() && common < prefix_text_.size() &&
           text[common] == prefix_text_[common]) {
      ++common;
    }
  }
  std::string out = text.substr(common);
  read_ = ids_.size();
  prefix_text_ = std::move(text);
  if (read_ - window_start_ > kWindow) {
    for (size_t back = 3; back >= 1; --back) {
      std::string candidate = decode_range(read_ - back, read_);
      if (!candidate.empty() && candidate.find(kReplacement) == std::string::npos) {
        window_start_ = read_ - back;
        prefix_text_ = std::move(candidate);
        break;
      }
    }
  }
  return out;
}

std::string StreamingDecoder::push(int32_t id) {
  if (id < 0 || id >= tokenizer_->vocab_size()) return std::string();
  ids_.push_back(id);
  return emit(false);
}

std::string StreamingDecoder::flush() { return emit(true); }

}  // namespace hearth::text
