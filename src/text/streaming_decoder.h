// Incremental detokenization for streamed output (SSE): text is released as tokens arrive,
// never half a UTF-8 character, and the pieces concatenate to the full decode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace hearth::text {

// Decodes a sliding window of recent ids and emits what the newest id added beyond the
// window's already-emitted prefix. Output is held back while it ends in U+FFFD (a
// character still arriving byte by byte) or while the window's text no longer extends what
// was emitted (a byte-fallback run mid-character), for at most kMaxPending tokens.
// Concatenated output == tokenizer.decode(all ids) except when the stream ends in the middle
// of a character (the full decode may then replace more bytes than were held back).
class StreamingDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Text that became final with `id` (often empty). An id outside the vocabulary is ignored.
  std::string push(int32_t id);
  // Everything still held back; call once when the stream ends.
  std::string flush();

  // The ids pushed so far.
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  static constexpr size_t kMaxPending = 16;  // tokens held back at most
  static constexpr size_t kWindow = 8;       // slide the window start once it is this long

  std::string decode_range(size_t begin, size_t end) const;
  std::string emit(bool force);

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  size_t window_start_ = 0;  // ids_[window_start_, read_) decode to prefix_text_
  size_t read_ = 0;          // ids before this have been emitted
  std::string prefix_text_;
};

}  // namespace hearth::text
