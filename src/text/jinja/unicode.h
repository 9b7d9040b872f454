// UTF-8 helpers for the Jinja interpreter: Python strings index, slice, strip and case-map by
// code point, so templates that say `s[-1]`, `s.strip()` or `s|upper` need code-point views of
// the UTF-8 bytes hearth stores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/utf8.h"

namespace hearth::text::jinja {

// Decodes the code point at s[i] and advances i; a byte that does not start a valid UTF-8
// sequence (text::utf8_sequence_length) decodes as U+FFFD and advances by one, so every input
// makes progress.
char32_t decode_utf8(std::string_view s, size_t& i);
using text::append_utf8;

// Byte offset of every code point, plus s.size() at the end (size = count + 1).
std::vector<size_t> codepoint_offsets(std::string_view s);
size_t codepoint_count(std::string_view s);

// Python's str.isspace() for one code point.
bool is_py_space(char32_t cp);
// Python's str.strip()/lstrip()/rstrip(): whitespace when chars is null, else any code point
// in *chars.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);

// Python's str.replace(old, new, count): at most `count` replacements (all when count < 0); an
// empty `from` inserts `to` before every code point and at the end.
std::string py_replace(std::string_view s, std::string_view from, std::string_view to,
                       int64_t count);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
// First code point upper-cased, the rest lower-cased (str.capitalize()).
std::string py_capitalize(std::string_view s);
// str.title(): a cased letter after an uncased character starts a word.
std::string py_title(std::string_view s);

bool is_py_alpha(char32_t cp);
bool is_py_digit(char32_t cp);
bool is_py_cased_upper(char32_t cp);
bool is_py_cased_lower(char32_t cp);

}  // namespace hearth::text::jinja
