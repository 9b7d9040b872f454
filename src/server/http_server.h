// The HTTP/1.1 front: Boost.Beast over one io_context served by a small thread pool, so a
// thousand idle SSE streams cost a socket and a few buffers each, never a thread. Handlers
// answer through an Exchange, from any thread, at once or later, whole or as a stream.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"

namespace hearth::server {

struct HttpRequest {
  std::string method;                                        // "GET", "POST", "OPTIONS", ...
  std::string path;                                          // target without the query string
  std::string query;                                         // after '?', may be empty
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased
  std::string body;
  std::string remote;  // peer address, for logs

  // The first header named `name` (lowercase), or "".
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// One request's reply channel. Thread-safe: every method may be called from any thread
// (an engine callback, a handler). Exactly one of respond() or begin_stream() ... end()
// should happen; calls after the connection is gone are dropped.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual void respond(HttpResponse response) = 0;
  // Sends status + headers with chunked transfer encoding; body bytes follow via write().
  virtual void begin_stream(HttpResponse head) = 0;
  virtual void write(std::string bytes) = 0;
  virtual void end() = 0;
  // Called once, on an I/O thread, when the client goes away or the server shuts down
  // before the reply completed. Set it before starting long work.
  virtual void on_cancel(std::function<void()> callback) = 0;
  virtual bool cancelled() const = 0;
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<Exchange>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  int threads = 2;
  std::size_t max_body_bytes = 32u << 20;    // 413 beyond
  std::size_t max_header_bytes = 64u << 10;  // 431 beyond
  int read_timeout_s = 30;                   // a request's headers and body must arrive within
  int idle_timeout_s = 120;                  // keep-alive connections idle longer are closed
  int write_timeout_s = 120;                 // a reader that takes no bytes this long is dropped
  std::size_t max_queued_bytes = 64u << 20;  // per-connection unsent stream bytes, then drop
};

struct HttpServerStats {
  int64_t connections_open = 0;
  int64_t connections_total = 0;
  int64_t requests_total = 0;
};

class HttpServer {
 public:
  // Binds and listens (a busy port or bad host is an error here), but serves nothing
  // until start().
  static Result<std::unique_ptr<HttpServer>> create(const HttpServerOptions& options,
                                                    HttpHandler handler);
  ~HttpServer();

  // Starts the I/O threads and accepting. Returns at once.
  void start();
  // Stops accepting, cancels every in-flight exchange, closes connections, joins threads.
  // Idempotent; safe from any thread except an I/O thread.
  void stop();
  // Blocks until SIGINT or SIGTERM arrives (or stop() is called), then stops. Returns the
  // signal number, or 0 when stopped otherwise.
  int wait_for_shutdown_signal();

  int port() const;  // the bound port (useful with port 0)
  HttpServerStats stats() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearth::server
