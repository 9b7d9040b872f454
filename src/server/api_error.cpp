// Rendering of ApiError per flavor, and the Status -> HTTP status mapping.
#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace hearth::server {

ApiError invalid_request(std::string message, std::string param) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

void throw_invalid(std::string message, std::string param) {
  throw ApiException{invalid_request(std::move(message), std::move(param))};
}

ApiError api_error_from_status(const Status& status) {
  ApiError e;
  e.message = status.message();
  switch (status.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kParse:
    case ErrorCode::kUnsupported:
      e.status = 400;
      break;
    case ErrorCode::kNotFound:
      e.status = 404;
      e.type = "not_found_error";
      break;
    case ErrorCode::kPermissionDenied:
      e.status = 403;
      e.type = "permission_error";
      break;
    case ErrorCode::kOutOfMemory:
    case ErrorCode::kUnavailable:
      e.status = 503;
      e.type = "overloaded_error";
      break;
    case ErrorCode::kCancelled:
      e.status = 499;
      e.type = "cancelled";
      break;
    default:
      e.status = 500;
      e.type = "api_error";
      break;
  }
  return e;
}

HttpResponse render_error(const ApiError& error, ApiFlavor flavor) {
  using nlohmann::json;
  HttpResponse r;
  r.status = error.status;
  json body;
  if (flavor == ApiFlavor::kAnthropic) {
    std::string type = error.type;
    if (error.status == 401) type = "authentication_error";
    if (error.status == 413) type = "request_too_large";
    if (error.status >= 500 && type == "invalid_request_error") type = "api_error";
    body = {{"type", "error"}, {"error", {{"type", type}, {"message", error.message}}}};
  } else {
    body = {{"error",
             {{"message", error.message},
              {"type", error.type},
              {"param", error.param.empty() ? json(nullptr) : json(error.param)},
              {"code", error.code.empty() ? json(nullptr) : json(error.code)}}}};
  }
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

}  // namespace hearth::server
