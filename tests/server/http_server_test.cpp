// The HTTP layer end to end over real sockets: auth, CORS, routes, errors, SSE framing for
// each API, stop sequences, keep-alive, size caps, disconnect-cancels, many idle streams.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "script_backend.h"
#include "server/api_server.h"
#include "server/bench_client.h"
#include "server/http_server.h"

namespace hearth::server {
namespace {

using nlohmann::json;

int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void send_all(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

std::string read_all(int fd) {
  std::string out;
  char buf[8192];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// Reads until `needle` has arrived (or timeout).
std::string read_until(int fd, const std::string& needle) {
  std::string out;
  char buf[8192];
  while (out.empty() || out.find(needle) == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string request(const std::string& method, const std::string& path, const std::string& body,
                    const std::string& extra_headers = "", bool close_conn = true) {
  return method + " " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         extra_headers + (close_conn ? "Connection: close\r\n" : "") +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

struct Reply {
  int status = 0;
  std::string head;
  std::string body;
};

// Decodes a whole HTTP/1.1 reply (Content-Length or chunked).
Reply parse_reply(const std::string& raw) {
  Reply r;
  auto end = raw.find("\r\n\r\n");
  if (end == std::string::npos || raw.size() < 12) return r;
  r.head = raw.substr(0, end);
  r.status = std::stoi(raw.substr(9, 3));
  std::string rest = raw.substr(end + 4);
  if (r.head.find("Transfer-Encoding: chunked") != std::string::npos) {
    std::size_t pos = 0;
    while (pos < rest.size()) {
      auto nl = rest.find("\r\n", pos);
      if (nl == std::string::npos) break;
      std::size_t len = std::stoul(rest.substr(pos, nl - pos), nullptr, 16);
      if (len == 0) break;
      r.body += rest.substr(nl + 2, len);
      pos = nl + 2 + len + 2;
    }
  } else {
    r.body = rest;
  }
  return r;
}

class ServerFixture : public ::testing::Test {
 protected:
  void start(std::string reply, int delay_ms = 0, std::string api_key = "",
             HttpServerOptions http = {}) {
    backend_ = std::make_shared<ScriptBackend>(std::move(reply), delay_ms);
    ApiServerOptions o;
    o.api_key = std::move(api_key);
    api_ = std::make_unique<ApiServer>(std::vector<std::shared_ptr<ModelBackend>>{backend_}, o);
    http.port = 0;
    auto s = HttpServer::create(http, [this](HttpRequest r, std::shared_ptr<Exchange> e) {
      api_->handle(std::move(r), std::move(e));
    });
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    server_ = std::move(*s);
    api_->set_http_server(server_.get());
    server_->start();
  }
  void TearDown() override {
    if (server_) server_->stop();
  }
  Reply call(const std::string& method, const std::string& path, const std::string& body = "",
             const std::string& headers = "") {
    int fd = connect_to(server_->port());
    send_all(fd, request(method, path, body, headers));
    std::string raw = read_all(fd);
    close(fd);
    return parse_reply(raw);
  }

  std::shared_ptr<ScriptBackend> backend_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<HttpServer> server_;
};

const char* kChat = R"({"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]})";

TEST_F(ServerFixture, AuthGuardsEverythingButHealth) {
  start("ok", 0, "sekret");
  EXPECT_EQ(call("GET", "/health").status, 200);
  Reply r = call("GET", "/v1/models");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(call("GET", "/v1/models", "", "Authorization: Bearer wrong\r\n").status, 401);
  EXPECT_EQ(call("GET", "/v1/models", "", "Authorization: Bearer sekret\r\n").status, 200);
  r = call("POST", "/v1/messages", kChat, "x-api-key: nope\r\n");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "authentication_error");
  EXPECT_EQ(call("GET", "/stats", "", "x-api-key: sekret\r\n").status, 200);
}

TEST_F(ServerFixture, CorsPreflightAndHeaders) {
  start("ok", 0, "k");
  Reply r = call("OPTIONS", "/v1/chat/completions", "",
                 "Origin: http://app\r\nAccess-Control-Request-Headers: authorization\r\n");
  EXPECT_EQ(r.status, 204);
  EXPECT_NE(r.head.find("Access-Control-Allow-Origin: http://app"), std::string::npos);
  EXPECT_NE(r.head.find("Access-Control-Allow-Headers: authorization"), std::string::npos);
  r = call("GET", "/health", "", "Origin: http://app\r\n");
  EXPECT_NE(r.head.find("Access-Control-Allow-Origin: http://app"), std::string::npos);
}

TEST_F(ServerFixture, ChatCompletionWithStopAcrossTokens) {
  start("Hello STOP world");
  json body = json::parse(kChat);
  body["stop"] = "STOP";
  Reply r = call("POST", "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "script-model");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], std::string("user:hi\nassistant:").size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 10);  // "Hello STOP": the stop's last token
}

TEST_F(ServerFixture, ChatStreamsChunksUsageAndDone) {
  start("abc");
  json body = json::parse(kChat);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["n"] = 2;
  body["logprobs"] = true;
  body["top_logprobs"] = 2;
  Reply r = call("POST", "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.head.find("text/event-stream"), std::string::npos);
  std::string content[2];
  int finishes = 0;
  json usage;
  std::size_t pos = 0;
  bool done = false;
  while ((pos = r.body.find("data: ", pos)) != std::string::npos) {
    auto end = r.body.find("\n\n", pos);
    std::string data = r.body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") {
      done = true;
      break;
    }
    json c = json::parse(data);
    if (c["choices"].empty()) {
      usage = c["usage"];
      continue;
    }
    int i = c["choices"][0]["index"];
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content")) content[i] += d["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) ++finishes;
    if (d.contains("content") && d["content"] != "") {
      EXPECT_EQ(c["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
    }
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(content[0], "abc");
  EXPECT_EQ(content[1], "abc");
  EXPECT_EQ(finishes, 2);
  EXPECT_EQ(usage["completion_tokens"], 6);
}

TEST_F(ServerFixture, AnthropicStreamEventSequence) {
  start("<think>why</think>Answer<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1}}</tool_call>");
  json body = {{"model", "claude"},
               {"max_tokens", 200},
               {"stream", true},
               {"messages", {{{"role", "user"}, {"content", "q"}}}},
               {"tools", {{{"name", "f"}, {"input_schema", {{"type", "object"}}}}}}};
  Reply r = call("POST", "/v1/messages", body.dump());
  ASSERT_EQ(r.status, 200);
  std::vector<std::string> events;
  std::size_t pos = 0;
  while ((pos = r.body.find("event: ", pos)) != std::string::npos) {
    auto nl = r.body.find('\n', pos);
    events.push_back(r.body.substr(pos + 7, nl - pos - 7));
    pos = nl;
  }
  std::vector<std::string> expected = {"message_start",       "ping",
                                       "content_block_start", "content_block_delta",
                                       "content_block_delta", "content_block_stop",
                                       "content_block_start", "content_block_delta",
                                       "content_block_stop",  "content_block_start",
                                       "content_block_delta", "content_block_stop",
                                       "message_delta",       "message_stop"};
  // Thinking arrives in one or more deltas; compare the shape with repeats folded.
  std::vector<std::string> folded;
  for (const auto& e : events) {
    if (!folded.empty() && folded.back() == e && e == "content_block_delta") continue;
    folded.push_back(e);
  }
  std::vector<std::string> expected_folded;
  for (const auto& e : expected) {
    if (!expected_folded.empty() && expected_folded.back() == e && e == "content_block_delta") {
      continue;
    }
    expected_folded.push_back(e);
  }
  EXPECT_EQ(folded, expected_folded) << r.body;
  EXPECT_NE(r.body.find("\"stop_reason\":\"tool_use\""), std::string::npos);
  EXPECT_NE(r.body.find("\"partial_json\":\"{\\\"a\\\":1}\""), std::string::npos) << r.body;

  body["stream"] = false;
  r = call("POST", "/v1/messages", body.dump());
  json j = json::parse(r.body);
  ASSERT_EQ(j["content"].size(), 3u) << r.body;
  EXPECT_EQ(j["content"][0]["type"], "thinking");
  EXPECT_EQ(j["content"][1]["text"], "Answer");
  EXPECT_EQ(j["content"][2]["input"]["a"], 1);
  EXPECT_EQ(j["stop_reason"], "tool_use");
}

TEST_F(ServerFixture, ResponsesAndCompletions) {
  start("<think>r</think>fine");
  Reply r =
      call("POST", "/v1/responses", R"({"model":"x","input":"hello","max_output_tokens":64})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["status"], "completed");
  EXPECT_EQ(j["output"][0]["type"], "reasoning");
  EXPECT_EQ(j["output"][1]["content"][0]["text"], "fine");
  r = call("POST", "/v1/responses", R"({"input":"hello","stream":true})");
  EXPECT_NE(r.body.find("event: response.created"), std::string::npos);
  EXPECT_NE(r.body.find("event: response.output_text.delta"), std::string::npos);
  EXPECT_NE(r.body.find("event: response.completed"), std::string::npos);
  r = call("POST", "/v1/completions", R"({"prompt":"x","max_tokens":4,"echo":true})");
  j = json::parse(r.body);
  EXPECT_EQ(j["choices"][0]["text"], "x<thi");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerFixture, ErrorsAreShapedAndNameFields) {
  HttpServerOptions http;
  http.max_body_bytes = 16384;
  http.max_header_bytes = 2048;
  start("ok", 0, "", http);
  Reply r = call("POST", "/v1/chat/completions", "{not json");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(json::parse(r.body)["error"]["message"].get<std::string>().find("not valid JSON"),
            std::string::npos);
  r = call("POST", "/v1/chat/completions",
           R"({"messages":[{"role":"user","content":"x"}],"top_p":7})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "top_p");
  r = call("POST", "/v1/messages", R"({"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(json::parse(r.body)["type"], "error");
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "invalid_request_error");
  r = call("POST", "/v1/chat/completions", std::string(20000, ' '));
  EXPECT_EQ(r.status, 413);
  r = call("GET", "/health", "", "X-Big: " + std::string(3000, 'a') + "\r\n");
  EXPECT_EQ(r.status, 431);
  r = call("GET", "/nope");
  EXPECT_EQ(r.status, 404);
  r = call("GET", "/v1/chat/completions");
  EXPECT_EQ(r.status, 405);
  // A prompt over the context is a 400 naming the limit, never a truncation.
  json over = {{"messages", {{{"role", "user"}, {"content", std::string(5000, 'a')}}}}};
  r = call("POST", "/v1/chat/completions", over.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("maximum context length is 4096"), std::string::npos) << r.body;
  // A max_tokens past the room left is clamped to it.
  json big_cap = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 1 << 30}};
  r = call("POST", "/v1/chat/completions", big_cap.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  // The server still answers after all that.
  EXPECT_EQ(call("GET", "/health").status, 200);
}

TEST_F(ServerFixture, KeepAliveServesSeveralRequests) {
  start("ok");
  int fd = connect_to(server_->port());
  for (int i = 0; i < 3; ++i) {
    send_all(fd, request("POST", "/v1/chat/completions", kChat, "", false));
    std::string raw = read_until(fd, "\r\n\r\n");
    auto cl = raw.find("Content-Length: ");
    ASSERT_NE(cl, std::string::npos);
    std::size_t length = std::stoul(raw.substr(cl + 16));
    while (raw.size() < raw.find("\r\n\r\n") + 4 + length) {
      std::string more = read_until(fd, "");
      if (more.empty()) break;
      raw += more;
    }
    EXPECT_NE(raw.find("HTTP/1.1 200"), std::string::npos) << i;
    EXPECT_NE(raw.find("Connection: keep-alive"), std::string::npos) << i;
  }
  send_all(fd, request("GET", "/health", "", "", true));
  EXPECT_NE(read_all(fd).find("\"ok\""), std::string::npos);
  close(fd);
}

TEST_F(ServerFixture, DisconnectCancelsAtOnce) {
  start(std::string(10000, 'x'), 5);
  json body = json::parse(kChat);
  body["stream"] = true;
  int fd = connect_to(server_->port());
  send_all(fd, request("POST", "/v1/chat/completions", body.dump(), "", false));
  read_until(fd, "\"content\":\"x\"");
  auto t0 = std::chrono::steady_clock::now();
  close(fd);
  while (backend_->cancelled_.load() == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(backend_->cancelled_.load(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  // Non-streaming requests are cancelled on disconnect too.
  fd = connect_to(server_->port());
  send_all(fd, request("POST", "/v1/chat/completions", kChat, "", false));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  close(fd);
  t0 = std::chrono::steady_clock::now();
  while (backend_->cancelled_.load() < 2 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(backend_->cancelled_.load(), 2);
}

TEST_F(ServerFixture, ManyIdleStreamsOnTwoThreads) {
  constexpr int kStreams = 1000;
  HttpServerOptions http;
  http.threads = 2;
  start(std::string(100000, 'y'), 200, "", http);
  json body = json::parse(kChat);
  body["stream"] = true;
  std::string req = request("POST", "/v1/chat/completions", body.dump(), "", false);
  std::vector<int> fds;
  for (int i = 0; i < kStreams; ++i) {
    int fd = connect_to(server_->port());
    ASSERT_GE(fd, 0) << i;
    send_all(fd, req);
    fds.push_back(fd);
  }
  int streaming = 0;
  for (int fd : fds) {
    if (read_until(fd, "\"content\":\"y\"").find("\"content\":\"y\"") != std::string::npos) {
      ++streaming;
    }
  }
  EXPECT_EQ(streaming, kStreams);
  EXPECT_EQ(server_->stats().connections_open, kStreams);
  // The server still answers a fresh request promptly while all of them stream.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(call("GET", "/health").status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));  // loaded CI box
  for (int fd : fds) close(fd);
}

// A client that sends its request the moment it connects leaves the reactor a stale
// "readable" edge for bytes the parser has already consumed; the disconnect watcher must not
// take that for a hang-up (it once cut about one stream in a thousand short of [DONE]).
TEST_F(ServerFixture, StaleReadWakeupNeverCutsAStream) {
  HttpServerOptions http;
  http.threads = 2;
  start("ab", 0, "", http);
  ServingBenchOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(server_->port()) + "/v1";
  o.concurrency = {8};
  o.requests = 1500;
  o.prompt_tokens = 4;
  o.tokens = 2;
  auto levels = run_serving_benchmark(o);
  ASSERT_TRUE(levels.ok()) << levels.status().to_string();
  EXPECT_EQ((*levels)[0].failed, 0) << (*levels)[0].first_error;
  EXPECT_EQ(backend_->cancelled_.load(), 0);
}

TEST_F(ServerFixture, ServingBenchmarkClientMeasuresEveryLevel) {
  start(std::string(64, 'z'), 1, "bench-key");
  ServingBenchOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(server_->port()) + "/v1";
  o.concurrency = {1, 4};
  o.prompt_tokens = 8;
  o.tokens = 10;
  o.api_key = "bench-key";
  auto levels = run_serving_benchmark(o);
  ASSERT_TRUE(levels.ok()) << levels.status().to_string();
  ASSERT_EQ(levels->size(), 2u);
  for (const auto& l : *levels) {
    EXPECT_EQ(l.failed, 0) << l.first_error;
    EXPECT_EQ(l.completion_tokens, static_cast<int64_t>(l.requests) * 10);
    EXPECT_GT(l.ttft_p50_ms, 0);
    EXPECT_GE(l.itl_p99_ms, l.itl_p50_ms);
    EXPECT_GT(l.throughput_tok_s, 0);
  }
  EXPECT_NE(format_serving_benchmark(o, *levels, false).find("TTFT p50"), std::string::npos);
  o.api_key = "wrong";
  o.concurrency = {1};
  o.requests = 1;
  auto denied = run_serving_benchmark(o);
  ASSERT_TRUE(denied.ok());
  EXPECT_EQ((*denied)[0].failed, 1);
  EXPECT_NE((*denied)[0].first_error.find("401"), std::string::npos);
}

TEST(HttpServer, BusyPortIsAClearError) {
  HttpServerOptions o;
  o.port = 0;
  auto first = HttpServer::create(o, [](HttpRequest, std::shared_ptr<Exchange>) {});
  ASSERT_TRUE(first.ok());
  o.port = (*first)->port();
  auto second = HttpServer::create(o, [](HttpRequest, std::shared_ptr<Exchange>) {});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("already in use"), std::string::npos)
      << second.status().message();
}

}  // namespace
}  // namespace hearth::server
