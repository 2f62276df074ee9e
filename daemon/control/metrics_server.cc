#include "daemon/control/metrics_server.h"

#include <array>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <exception>
#include <memory>
#include <stdexcept>

#include "daemon/control/accept_loop.h"

namespace pairwall::control {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

std::string reply(std::string_view status, std::string_view content_type, std::string_view body, bool head,
                  std::string_view extra_headers = {}) {
  std::string out = "HTTP/1.0 ";
  out += status;
  out += "\r\n";
  out += extra_headers;
  out += "Content-Type: ";
  out += content_type;
  out += "\r\nContent-Length: " + std::to_string(body.size());
  out += "\r\nConnection: close\r\n\r\n";
  if (!head) out += body;
  return out;
}

}  // namespace

std::string http_metrics_response(std::string_view head, const std::function<std::string()>& render) {
  const auto eol = head.find_first_of("\r\n");
  const std::string_view line = head.substr(0, eol);
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      line.substr(sp2 + 1).substr(0, 5) != "HTTP/") {
    return reply("400 Bad Request", "text/plain", "bad request\n", false);
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  // Prometheus may add a query string; the path alone decides.
  target = target.substr(0, target.find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    // RFC 9110 15.5.6: a 405 names the methods the resource takes.
    return reply("405 Method Not Allowed", "text/plain", "only GET /metrics\n", false,
                 "Allow: GET, HEAD\r\n");
  }
  if (target != "/metrics")
    return reply("404 Not Found", "text/plain", "not found: try /metrics\n", head_only);
  std::string body;
  try {
    body = render();
  } catch (const std::exception& e) {
    // A collector that fails (out of memory, say) costs this scrape, not the daemon: an exception
    // through the loop would end pairwalld with its hooks in place, as the control socket guards.
    return reply("500 Internal Server Error", "text/plain", std::string("metrics failed: ") + e.what() + "\n",
                 head_only);
  }
  return reply("200 OK", "text/plain; version=0.0.4; charset=utf-8", body, head_only);
}

class MetricsServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, MetricsServer& server)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        server_(server),
        open_sessions_(server.sessions_) {
    ++*open_sessions_;
  }
  ~Session() { --*open_sessions_; }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start() {
    // A scraper that connects and says nothing must not hold the socket forever.
    timer_.expires_after(std::chrono::seconds(5));
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code ignored;
        self->socket_.close(ignored);
      }
    });
    read();
  }

 private:
  void read() {
    socket_.async_read_some(
        asio::buffer(chunk_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
          if (ec) {
            self->timer_.cancel();
            return;
          }
          self->head_.append(self->chunk_.data(), n);
          const bool complete = self->head_.find("\r\n\r\n") != std::string::npos ||
                                self->head_.find("\n\n") != std::string::npos;
          if (!complete && self->head_.size() < kMaxRequestHead) {
            self->read();
            return;
          }
          if (!complete) {
            self->out_ = "HTTP/1.0 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n";
          } else {
            self->out_ = http_metrics_response(self->head_, self->server_.render_);
            ++self->server_.scrapes_;
          }
          asio::async_write(self->socket_, asio::buffer(self->out_),
                            [self](boost::system::error_code, std::size_t) {
                              self->timer_.cancel();
                              boost::system::error_code ignored;
                              self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
                              self->socket_.close(ignored);
                            });
        });
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  MetricsServer& server_;
  std::array<char, 2048> chunk_{};
  std::string head_;
  std::string out_;
  std::shared_ptr<std::size_t> open_sessions_;
};

tcp::endpoint MetricsServer::endpoint_of(const std::string& host, uint16_t port) {
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) throw std::runtime_error("metrics: '" + host + "' is not an IP address");
  return {address, port};
}

tcp::acceptor MetricsServer::listening(const asio::any_io_executor& executor, const tcp::endpoint& endpoint,
                                       boost::system::error_code& ec) {
  tcp::acceptor acceptor(executor);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  return acceptor;
}

std::runtime_error MetricsServer::cannot_listen(const std::string& host, uint16_t port,
                                                const boost::system::error_code& ec) {
  return std::runtime_error("metrics: cannot listen on " + host + ":" + std::to_string(port) + ": " +
                            ec.message() + " (set [metrics] listen, or \"\" to disable)");
}

MetricsServer::MetricsServer(asio::io_context& io, const std::string& host, uint16_t port,
                             std::function<std::string()> render)
    : acceptor_(io), retry_(io), render_(std::move(render)) {
  boost::system::error_code ec;
  acceptor_ = listening(io.get_executor(), endpoint_of(host, port), ec);
  if (ec) throw cannot_listen(host, port, ec);
}

void MetricsServer::listen_on(const std::string& host, uint16_t port) {
  const tcp::endpoint wanted = endpoint_of(host, port);
  boost::system::error_code ec;
  tcp::acceptor fresh = listening(acceptor_.get_executor(), wanted, ec);
  if (ec == asio::error::address_in_use && acceptor_.is_open()) {
    // The running listener holds the port (the same one on another address, or a wildcard's): it
    // closes first, and comes back when the new address cannot be had either.
    const tcp::endpoint before = acceptor_.local_endpoint();
    stop();
    fresh = listening(acceptor_.get_executor(), wanted, ec);
    if (ec) {
      boost::system::error_code again;
      acceptor_ = listening(acceptor_.get_executor(), before, again);
      if (!again) start();
      throw cannot_listen(host, port, ec);
    }
  } else if (ec) {
    throw cannot_listen(host, port, ec);
  }
  stop();  // the old accept's handler sees operation_aborted, and touches nothing
  acceptor_ = std::move(fresh);
  start();
}

void MetricsServer::start() {
  stopped_ = false;
  accept_connections(acceptor_, retry_, stopped_, [this](tcp::socket socket) {
    // Idle connections hold a descriptor each for up to 5 s: without a bound, anyone who can reach
    // the port could take all of the daemon's.
    if (*sessions_ >= kMaxSessions) {
      ++refused_;
      boost::system::error_code ignored;
      socket.close(ignored);
      return;
    }
    std::make_shared<Session>(std::move(socket), *this)->start();
  });
}

void MetricsServer::stop() {
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  retry_.cancel();
}

uint16_t MetricsServer::port() const {
  boost::system::error_code ec;
  return acceptor_.local_endpoint(ec).port();
}

}  // namespace pairwall::control
