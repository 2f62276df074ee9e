// A tiny HTTP/1.0 responder for Prometheus: GET /metrics answers the registry's exposition, any
// other path 404, any other method 405; one request per connection, then close. Runs on the
// daemon's Asio loop; a scrape costs one pass over the counters, nothing per packet.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pairwall::control {

// The full HTTP response for one request head (request line and headers). `render` is called
// only for GET/HEAD /metrics.
std::string http_metrics_response(std::string_view request_head, const std::function<std::string()>& render);

class MetricsServer {
 public:
  // Binds host:port; throws std::runtime_error naming the address when it cannot.
  MetricsServer(boost::asio::io_context& io, const std::string& host, uint16_t port,
                std::function<std::string()> render);
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  void start();
  void stop();
  // Listens on host:port from now on (a reload's [metrics] listen), a stopped server again: the
  // new address bound before the old one closes where both can be bound at once, else after it,
  // the old one bound again when the new one cannot be. Open sessions finish either way. Throws as
  // the constructor does; the server then listens where it did.
  void listen_on(const std::string& host, uint16_t port);
  uint16_t port() const;  // the bound port (useful with port 0)
  uint64_t scrapes() const { return scrapes_; }
  uint64_t refused() const { return refused_; }  // connections closed at once: kMaxSessions open

  static constexpr std::size_t kMaxRequestHead = 8192;
  static constexpr std::size_t kMaxSessions = 32;

 private:
  class Session;

  static boost::asio::ip::tcp::endpoint endpoint_of(const std::string& host, uint16_t port);
  // An acceptor listening on `endpoint`; `ec` says why not.
  static boost::asio::ip::tcp::acceptor listening(const boost::asio::any_io_executor& executor,
                                                  const boost::asio::ip::tcp::endpoint& endpoint,
                                                  boost::system::error_code& ec);
  static std::runtime_error cannot_listen(const std::string& host, uint16_t port,
                                          const boost::system::error_code& ec);

  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer retry_;
  std::function<std::string()> render_;
  uint64_t scrapes_ = 0;
  // Shared with the sessions, which may outlive the server: at shutdown the loop, destroyed after
  // it, frees the sessions its pending handlers hold.
  std::shared_ptr<std::size_t> sessions_ = std::make_shared<std::size_t>(0);
  uint64_t refused_ = 0;
  bool stopped_ = false;
};

}  // namespace pairwall::control
