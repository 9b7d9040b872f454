// Client-facing errors in the shape each API's own clients parse: OpenAI's
// {"error":{"message","type","param","code"}} and Anthropic's
// {"type":"error","error":{"type","message"}}. Messages name the offending field.
#pragma once

#include <string>

#include "base/status.h"
#include "server/http_server.h"

namespace hearth::server {

enum class ApiFlavor { kOpenAI, kAnthropic };

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the field at fault ("messages[0].content"), may be empty
  std::string code;   // OpenAI's machine code ("invalid_api_key"), may be empty
};

// Validation failures thrown inside request parsers; caught at the route boundary.
struct ApiException {
  ApiError error;
};

ApiError invalid_request(std::string message, std::string param = "");
[[noreturn]] void throw_invalid(std::string message, std::string param = "");

// Maps a library Status onto an HTTP error (kInvalidArgument/kOutOfRange -> 400, ...).
ApiError api_error_from_status(const Status& status);

HttpResponse render_error(const ApiError& error, ApiFlavor flavor);

}  // namespace hearth::server
