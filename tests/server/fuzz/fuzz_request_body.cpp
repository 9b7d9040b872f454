// libFuzzer target: arbitrary bytes as the body of every generation route's parser. Any
// outcome but a parsed request or an ApiException (a crash, a sanitizer report, another
// exception type) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/generation_request.h"
#include "server/json_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hearth::server;
  std::string_view body(reinterpret_cast<const char*>(data), size);
  using Parser = GenerationRequest (*)(const nlohmann::json&);
  for (Parser p : {parse_chat_completions, parse_completions, parse_messages, parse_responses}) {
    try {
      p(parse_json_body(body));
    } catch (const ApiException&) {
    }
  }
  return 0;
}
