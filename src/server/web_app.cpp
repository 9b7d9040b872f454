// Serves the embedded web app. The headers pin the page to this origin: inline script and
// style only, fetches only back to this server, never framed.
#include "server/web_app.h"

#include <array>

namespace hearth::server {

std::optional<HttpResponse> web_app_response(const std::string& path) {
  static constexpr std::array<std::string_view, 5> kRoutes = {"/", "/chat", "/chat/", "/status",
                                                              "/status/"};
  bool known = false;
  for (std::string_view route : kRoutes) known = known || path == route;
  if (!known) return std::nullopt;
  HttpResponse r;
  r.content_type = "text/html; charset=utf-8";
  r.body = std::string(web_app_html());
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'unsafe-inline'; "
                         "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
                         "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  return r;
}

}  // namespace hearth::server
