// Beast/Asio implementation of HttpServer. Every connection is a Session living on its own
// strand; responses (whole or chunked SSE) go through one per-session write queue of raw
// bytes, so an engine thread only ever posts strings and never touches a socket.
#include "server/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <optional>
#include <unordered_map>

#include "base/log.h"

namespace hearth::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return "";
}

namespace {

class Session;

// Shared between the server, its sessions and their exchanges, so that an exchange held by
// an engine callback after shutdown finds a dead flag instead of a dead io_context.
struct Registry {
  std::mutex mu;
  bool io_alive = true;
  bool stopping = false;
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;
  std::atomic<int64_t> connections_total{0};
  std::atomic<int64_t> requests_total{0};
};

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string status_line(int status) {
  auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  if (reason.empty()) reason = "Unknown";
  return fmt::format("HTTP/1.1 {} {}\r\n", status, std::string_view(reason.data(), reason.size()));
}

std::string serialize_head(const HttpResponse& r, bool keep_alive, bool chunked) {
  std::string out = status_line(r.status);
  out += "Server: hearth\r\n";
  if (!r.content_type.empty()) out += "Content-Type: " + r.content_type + "\r\n";
  for (const auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
  if (chunked) {
    out += "Transfer-Encoding: chunked\r\n";
  } else {
    out += fmt::format("Content-Length: {}\r\n", r.body.size());
  }
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  out += "\r\n";
  return out;
}

class ExchangeImpl;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpServerOptions& options, HttpHandler* handler,
          std::shared_ptr<Registry> registry, uint64_t id)
      : stream_(std::move(socket)),
        options_(options),
        handler_(handler),
        registry_(std::move(registry)),
        id_(id) {}

  ~Session() {
    std::lock_guard lock(registry_->mu);
    registry_->sessions.erase(id_);
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

  // Runs `fn` on this session's strand, unless the io_context is gone.
  void post(std::function<void()> fn) {
    std::lock_guard lock(registry_->mu);
    if (!registry_->io_alive) return;
    net::post(stream_.get_executor(), std::move(fn));
  }

  // Strand-only operations, reached from ExchangeImpl.
  void respond(ExchangeImpl* ex, HttpResponse response);
  void begin_stream(ExchangeImpl* ex, HttpResponse head);
  void write_chunk(ExchangeImpl* ex, std::string bytes);
  void end_stream(ExchangeImpl* ex);
  void shutdown();  // server stopping: cancel the exchange and close

 private:
  void do_read();
  void on_read(beast::error_code ec);
  void watch_for_disconnect();
  void send_error_and_close(int status, std::string_view message);
  void enqueue(std::string bytes);
  void do_write();
  void on_written(beast::error_code ec);
  void finish_exchange();
  void close(bool cancel_exchange);

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  const HttpServerOptions& options_;
  HttpHandler* handler_;
  std::shared_ptr<Registry> registry_;
  uint64_t id_;

  std::shared_ptr<ExchangeImpl> current_;
  bool keep_alive_ = true;
  bool streaming_ = false;
  bool response_complete_ = false;  // the whole reply is queued
  bool served_one_ = false;
  bool closed_ = false;
  uint64_t watch_generation_ = 0;
  std::deque<std::string> queue_;
  std::size_t queued_bytes_ = 0;
  bool writing_ = false;
};

class ExchangeImpl : public Exchange {
 public:
  explicit ExchangeImpl(std::weak_ptr<Session> session) : session_(std::move(session)) {}

  void respond(HttpResponse response) override {
    run([response = std::move(response)](Session& s, ExchangeImpl* ex) mutable {
      s.respond(ex, std::move(response));
    });
  }
  void begin_stream(HttpResponse head) override {
    run([head = std::move(head)](Session& s, ExchangeImpl* ex) mutable {
      s.begin_stream(ex, std::move(head));
    });
  }
  void write(std::string bytes) override {
    if (bytes.empty()) return;
    run([bytes = std::move(bytes)](Session& s, ExchangeImpl* ex) mutable {
      s.write_chunk(ex, std::move(bytes));
    });
  }
  void end() override {
    run([](Session& s, ExchangeImpl* ex) { s.end_stream(ex); });
  }
  void on_cancel(std::function<void()> callback) override {
    std::unique_lock lock(mu_);
    if (cancelled_) {
      lock.unlock();
      callback();
      return;
    }
    cancel_ = std::move(callback);
  }
  bool cancelled() const override {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

  // Fires the cancel callback once (strand).
  void cancel() {
    std::function<void()> cb;
    {
      std::lock_guard lock(mu_);
      if (cancelled_ || done_) return;
      cancelled_ = true;
      cb = std::move(cancel_);
    }
    if (cb) cb();
  }
  void mark_done() {
    std::lock_guard lock(mu_);
    done_ = true;
    cancel_ = nullptr;
  }

 private:
  template <typename Fn>
  void run(Fn fn) {
    auto s = session_.lock();
    if (!s) return;
    auto self = std::static_pointer_cast<ExchangeImpl>(shared_from_this_());
    s->post([s, self, fn = std::move(fn)]() mutable { fn(*s, self.get()); });
  }
  std::shared_ptr<Exchange> shared_from_this_() { return self_.lock(); }

 public:
  std::weak_ptr<Exchange> self_;

 private:
  std::weak_ptr<Session> session_;
  mutable std::mutex mu_;
  bool cancelled_ = false;
  bool done_ = false;
  std::function<void()> cancel_;
};

void Session::do_read() {
  if (closed_) return;
  parser_.emplace();
  parser_->body_limit(options_.max_body_bytes);
  parser_->header_limit(static_cast<std::uint32_t>(options_.max_header_bytes));
  stream_.expires_after(
      std::chrono::seconds(served_one_ ? options_.idle_timeout_s : options_.read_timeout_s));
  http::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
}

void Session::send_error_and_close(int status, std::string_view message) {
  keep_alive_ = false;
  HttpResponse r;
  r.status = status;
  r.body = fmt::format(R"({{"error":{{"message":"{}","type":"invalid_request_error"}}}})", message);
  response_complete_ = true;
  enqueue(serialize_head(r, false, false) + r.body);
}

void Session::on_read(beast::error_code ec) {
  if (closed_) return;
  if (ec == http::error::body_limit) {
    return send_error_and_close(
        413, fmt::format("request body exceeds the {} byte limit", options_.max_body_bytes));
  }
  if (ec == http::error::header_limit) {
    return send_error_and_close(
        431, fmt::format("request headers exceed the {} byte limit", options_.max_header_bytes));
  }
  if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::eof ||
      ec == net::error::connection_reset || ec == net::error::operation_aborted) {
    return close(false);
  }
  if (ec) {
    // Bytes that are not HTTP: answer once, then hang up (the stream is out of sync).
    if (buffer_.size() > 0 || parser_->got_some()) {
      return send_error_and_close(400, "malformed HTTP request");
    }
    return close(false);
  }
  served_one_ = true;
  stream_.expires_never();
  auto message = parser_->release();
  HttpRequest req;
  req.method = std::string(message.method_string());
  std::string_view target(message.target().data(), message.target().size());
  auto q = target.find('?');
  req.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) req.query = std::string(target.substr(q + 1));
  for (const auto& field : message) {
    req.headers.emplace_back(lowercase({field.name_string().data(), field.name_string().size()}),
                             std::string(field.value()));
  }
  req.body = std::move(message.body());
  beast::error_code peer_ec;
  auto peer = stream_.socket().remote_endpoint(peer_ec);
  if (!peer_ec) req.remote = peer.address().to_string();
  keep_alive_ = message.keep_alive();
  streaming_ = false;
  response_complete_ = false;
  auto ex = std::make_shared<ExchangeImpl>(weak_from_this());
  ex->self_ = ex;
  current_ = ex;
  registry_->requests_total.fetch_add(1);
  watch_for_disconnect();
  (*handler_)(std::move(req), ex);
}

// While a reply is pending the client sends nothing, so the socket turning readable at end
// of stream means it hung up: cancel the work at once instead of at the next write. The
// wakeup alone proves nothing: the reactor's edge-triggered readiness can be stale (raised
// by the request bytes the parser already consumed), so a non-blocking peek decides.
void Session::watch_for_disconnect() {
  uint64_t generation = ++watch_generation_;
  stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(),
                                                       generation](beast::error_code ec) {
    if (ec || self->closed_ || generation != self->watch_generation_ || !self->current_) {
      return;
    }
    char byte = 0;
    ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return;  // a pipelined request arrived early; it is read after this reply
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return self->watch_for_disconnect();  // stale readiness: watch again
    }
    self->close(true);  // orderly end of stream (0) or a reset: the client is gone
  });
}

void Session::respond(ExchangeImpl* ex, HttpResponse response) {
  if (closed_ || ex != current_.get() || streaming_ || response_complete_) return;
  response_complete_ = true;
  ex->mark_done();
  if (registry_->stopping) keep_alive_ = false;
  enqueue(serialize_head(response, keep_alive_, false) + response.body);
}

void Session::begin_stream(ExchangeImpl* ex, HttpResponse head) {
  if (closed_ || ex != current_.get() || streaming_ || response_complete_) return;
  streaming_ = true;
  enqueue(serialize_head(head, keep_alive_, true));
}

void Session::write_chunk(ExchangeImpl* ex, std::string bytes) {
  if (closed_ || ex != current_.get() || !streaming_ || response_complete_) return;
  std::string chunk = fmt::format("{:x}\r\n", bytes.size());
  chunk += bytes;
  chunk += "\r\n";
  enqueue(std::move(chunk));
}

void Session::end_stream(ExchangeImpl* ex) {
  if (closed_ || ex != current_.get() || !streaming_ || response_complete_) return;
  response_complete_ = true;
  ex->mark_done();
  enqueue("0\r\n\r\n");
}

void Session::enqueue(std::string bytes) {
  queued_bytes_ += bytes.size();
  queue_.push_back(std::move(bytes));
  if (queued_bytes_ > options_.max_queued_bytes) {
    spdlog::warn("dropping a connection whose reader fell {} bytes behind", queued_bytes_);
    return close(true);
  }
  if (!writing_) do_write();
}

void Session::do_write() {
  writing_ = true;
  stream_.expires_after(std::chrono::seconds(options_.write_timeout_s));
  net::async_write(
      stream_, net::buffer(queue_.front()),
      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_written(ec); });
}

void Session::on_written(beast::error_code ec) {
  writing_ = false;
  if (closed_) return;
  if (ec) return close(true);
  queued_bytes_ -= queue_.front().size();
  queue_.pop_front();
  if (!queue_.empty()) return do_write();
  stream_.expires_never();
  if (response_complete_) finish_exchange();
}

void Session::finish_exchange() {
  current_.reset();
  ++watch_generation_;
  if (!keep_alive_ || registry_->stopping) {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    return close(false);
  }
  do_read();
}

void Session::close(bool cancel_exchange) {
  if (closed_) return;
  closed_ = true;
  if (current_ && cancel_exchange) current_->cancel();
  current_.reset();
  queue_.clear();
  queued_bytes_ = 0;
  beast::error_code ec;
  stream_.socket().close(ec);
}

void Session::shutdown() {
  if (closed_) return;
  // An idle keep-alive connection just closes; one mid-reply is cancelled.
  close(true);
}

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  HttpHandler handler;
  std::shared_ptr<Registry> registry = std::make_shared<Registry>();
  net::io_context ioc;
  tcp::acceptor acceptor{net::make_strand(ioc)};
  net::signal_set signals{ioc};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stop_requested = false;
  int signal_number = 0;
  bool stopped = false;

  void do_accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket s) {
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
        spdlog::warn("accept failed: {}", ec.message());
        // Out of descriptors and similar: back off briefly instead of spinning.
        auto timer = std::make_shared<net::steady_timer>(ioc, std::chrono::milliseconds(50));
        timer->async_wait([this, timer](beast::error_code) { do_accept(); });
        return;
      }
      beast::error_code nec;
      s.set_option(tcp::no_delay(true), nec);
      std::shared_ptr<Session> session;
      {
        std::lock_guard lock(registry->mu);
        if (registry->stopping) return;
        uint64_t id = registry->next_id++;
        session = std::make_shared<Session>(std::move(s), options, &handler, registry, id);
        registry->sessions[id] = session;
      }
      registry->connections_total.fetch_add(1);
      session->start();
      do_accept();
    });
  }
};

Result<std::unique_ptr<HttpServer>> HttpServer::create(const HttpServerOptions& options,
                                                       HttpHandler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  // Many idle streams need many descriptors: lift the soft limit to the hard one.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  beast::error_code ec;
  auto address = net::ip::make_address(options.host, ec);
  if (ec) {
    // A host name such as "localhost": resolve it.
    tcp::resolver resolver(impl->ioc);
    auto results = resolver.resolve(options.host, std::to_string(options.port), ec);
    if (ec || results.empty()) {
      return invalid_argument_error("cannot bind --host '{}': {}", options.host,
                                    ec ? ec.message() : "no address");
    }
    address = results.begin()->endpoint().address();
  }
  tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (ec) {
    if (ec == net::error::address_in_use) {
      return unavailable_error(
          "port {} on {} is already in use (another server running?); pick another with --port",
          options.port, options.host);
    }
    return io_error("cannot bind {}:{}: {}", options.host, options.port, ec.message());
  }
  impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return io_error("cannot listen on {}:{}: {}", options.host, options.port, ec.message());
  impl->signals.add(SIGINT, ec);
  impl->signals.add(SIGTERM, ec);
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  stop();
  std::lock_guard lock(impl_->registry->mu);
  impl_->registry->io_alive = false;
}

void HttpServer::start() {
  Impl* impl = impl_.get();
  impl->work.emplace(impl->ioc.get_executor());
  impl->signals.async_wait([impl](beast::error_code ec, int sig) {
    if (ec) return;
    std::lock_guard lock(impl->stop_mu);
    impl->stop_requested = true;
    impl->signal_number = sig;
    impl->stop_cv.notify_all();
  });
  impl->do_accept();
  int n = std::max(1, impl->options.threads);
  for (int i = 0; i < n; ++i) impl->threads.emplace_back([impl] { impl->ioc.run(); });
}

void HttpServer::stop() {
  Impl* impl = impl_.get();
  {
    std::lock_guard lock(impl->stop_mu);
    if (impl->stopped) return;
    impl->stopped = true;
    impl->stop_requested = true;
    impl->stop_cv.notify_all();
  }
  std::vector<std::shared_ptr<Session>> sessions;
  {
    std::lock_guard lock(impl->registry->mu);
    impl->registry->stopping = true;
    for (auto& [id, weak] : impl->registry->sessions) {
      if (auto s = weak.lock()) sessions.push_back(std::move(s));
    }
  }
  net::post(impl->acceptor.get_executor(), [impl] {
    beast::error_code ec;
    impl->acceptor.close(ec);
    impl->signals.cancel(ec);
  });
  for (auto& s : sessions) s->post([s] { s->shutdown(); });
  sessions.clear();
  if (!impl->threads.empty()) {
    impl->work.reset();
    // Let the posted closes run, then stop whatever is left (timers, stuck writes).
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    impl->ioc.stop();
    for (auto& t : impl->threads) t.join();
    impl->threads.clear();
  }
}

int HttpServer::wait_for_shutdown_signal() {
  std::unique_lock lock(impl_->stop_mu);
  impl_->stop_cv.wait(lock, [this] { return impl_->stop_requested; });
  int sig = impl_->signal_number;
  lock.unlock();
  stop();
  return sig;
}

int HttpServer::port() const {
  beast::error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

HttpServerStats HttpServer::stats() const {
  HttpServerStats s;
  {
    std::lock_guard lock(impl_->registry->mu);
    s.connections_open = static_cast<int64_t>(impl_->registry->sessions.size());
  }
  s.connections_total = impl_->registry->connections_total.load();
  s.requests_total = impl_->registry->requests_total.load();
  return s;
}

}  // namespace hearth::server
