// The web app's routes: the embedded page is web/app.html byte for byte, it answers at /,
// /chat and /status as HTML without the API key, and nothing else changes route.
#include "server/web_app.h"

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <fstream>
#include <sstream>

#include "script_backend.h"
#include "server/api_server.h"

namespace hearth::server {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

std::string read_source(const std::string& rel) {
  std::ifstream in(std::string(HEARTH_SOURCE_DIR) + "/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(WebApp, EmbeddedPageIsTheSourceFile) {
  std::string source = read_source("web/app.html");
  ASSERT_GT(source.size(), 1000u);
  EXPECT_EQ(web_app_html(), source) << "rebuild: the embedded page is stale";
}

TEST(WebApp, AnswersOnlyItsRoutes) {
  for (const char* path : {"/", "/chat", "/status", "/chat/", "/status/"}) {
    auto r = web_app_response(path);
    ASSERT_TRUE(r.has_value()) << path;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->content_type, "text/html; charset=utf-8");
    EXPECT_EQ(r->body, web_app_html());
  }
  for (const char* path : {"", "/chatx", "/status/x", "/v1/models", "/index.html", "//"}) {
    EXPECT_FALSE(web_app_response(path).has_value()) << path;
  }
}

class WebAppServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ApiServerOptions o;
    o.api_key = "sekret";
    api_ = std::make_unique<ApiServer>(
        std::vector<std::shared_ptr<ModelBackend>>{std::make_shared<ScriptBackend>("ok")}, o);
    HttpServerOptions h;
    h.port = 0;
    auto s = HttpServer::create(h, [this](HttpRequest r, std::shared_ptr<Exchange> e) {
      api_->handle(std::move(r), std::move(e));
    });
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(*s);
    server_->start();
  }
  void TearDown() override {
    if (server_) server_->stop();
  }
  http::response<http::string_body> call(http::verb method, const std::string& target) {
    boost::asio::io_context io;
    tcp::socket socket(io);
    socket.connect(
        {boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server_->port())});
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::connection, "close");
    req.prepare_payload();
    http::write(socket, req);
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    if (method == http::verb::head) {
      http::response_parser<http::string_body> parser;
      parser.skip(true);
      http::read(socket, buffer, parser);
      return parser.release();
    }
    http::read(socket, buffer, res);
    return res;
  }

  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(WebAppServer, PageNeedsNoKeyButTheApiDoes) {
  for (const char* path : {"/", "/chat", "/status"}) {
    auto r = call(http::verb::get, path);
    EXPECT_EQ(r.result_int(), 200) << path;
    EXPECT_EQ(r[http::field::content_type], "text/html; charset=utf-8") << path;
    EXPECT_EQ(r.body(), web_app_html()) << path;
    EXPECT_NE(std::string(r["Content-Security-Policy"]).find("connect-src 'self'"),
              std::string::npos);
  }
  EXPECT_EQ(call(http::verb::head, "/").result_int(), 200);
  EXPECT_EQ(call(http::verb::get, "/stats").result_int(), 401);
  EXPECT_EQ(call(http::verb::get, "/v1/models").result_int(), 401);
  // Only GET/HEAD reach the page; other methods and near-miss paths stay unrouted.
  EXPECT_EQ(call(http::verb::post, "/").result_int(), 401);
  EXPECT_EQ(call(http::verb::get, "/chat/x").result_int(), 401);
}

}  // namespace
}  // namespace hearth::server
