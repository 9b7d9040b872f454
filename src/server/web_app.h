// The browser web app (chat + status) that `hearth serve` answers at /, /chat and /status.
// Its page lives in web/app.html and is compiled in at build time (cmake/HearthEmbed.cmake),
// so the binary serves it with no files beside it and no network.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/http_server.h"

namespace hearth::server {

// web/app.html, byte for byte (defined in the generated web_app_html.cpp).
std::string_view web_app_html();

// The page as an HTML response when `path` is one of the app's routes ("/", "/chat",
// "/status", each also with a trailing slash); nullopt for every other path. The page
// holds no secret, so callers serve it without authentication; its API calls carry the key.
std::optional<HttpResponse> web_app_response(const std::string& path);

}  // namespace hearth::server
