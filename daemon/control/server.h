// The control socket: a Unix stream socket on an Asio loop, framed requests in, one response each
// out (proto/control.proto). Connections are served one request at a time, in order; a malformed or
// oversized frame is answered with an error and the connection closed, and so is a connection
// beyond kMaxSessions open ones. A connection is closed when it idles, or takes too long over a
// request (ControlTimeouts).
//
// The daemon runs the socket on a thread of its own and hands requests to its control loop
// (ControlDispatch), answering on the socket's thread those that must not wait for that loop:
// keepalived's health check times out in a second, and a large rule set compiles on the loop for
// longer than that.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "proto/control.pb.h"

namespace pairwall::control {

// True when something accepts connections on the Unix socket `path` (a running daemon); false for
// a stale socket file or none.
bool socket_answers(const std::string& path);

// How long a session may take over each step; past it the connection is closed.
struct ControlTimeouts {
  // For the next request to begin (after connecting, or after an answer), for each read within
  // it, and for an answer to be written.
  std::chrono::milliseconds idle = std::chrono::seconds(30);
  // From a request's first byte to its whole frame: a client that trickles in a byte now and then
  // would otherwise hold one of the kMaxSessions for as long as it likes.
  std::chrono::milliseconds request = std::chrono::seconds(30);
};

// Where requests are handled. By default, in line on the socket's own loop.
struct ControlDispatch {
  // Answers a request at once on the socket's loop and returns true, or returns false to leave it
  // to the handler. Must be safe to call from the socket's thread.
  std::function<bool(const Request&, Response&)> immediate;
  // The loop the handler runs on, when it is not the socket's; the answer is written back on the
  // socket's loop. The requests queued on it hold sessions whose sockets are the socket loop's:
  // destroy it before the socket's loop (the daemon declares it after).
  boost::asio::io_context* handler_loop = nullptr;
};

class ControlServer {
 public:
  using Handler = std::function<void(const Request&, Response&)>;

  // Creates the socket's directory if needed, refuses to start when another daemon answers on
  // `path`, removes a stale socket file, binds and applies `mode`. Throws std::runtime_error with
  // a message naming the path.
  ControlServer(boost::asio::io_context& io, std::string path, uint32_t mode, Handler handler,
                ControlTimeouts timeouts = {}, ControlDispatch dispatch = {});
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  void start();
  void stop();
  const std::string& path() const { return path_; }
  // Readable from any thread.
  uint64_t connections() const { return connections_.load(std::memory_order_relaxed); }
  uint64_t bad_frames() const { return bad_frames_.load(std::memory_order_relaxed); }
  // Answered with an error and closed: kMaxSessions open.
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

  // Each session may buffer a request of up to kMaxRequestBytes: a group member allowed on the
  // socket must not hold the daemon's descriptors and memory with idle connections.
  static constexpr std::size_t kMaxSessions = 16;

 private:
  class Session;
  static void refuse(boost::asio::local::stream_protocol::socket socket);

  boost::asio::io_context& io_;
  std::string path_;
  Handler handler_;
  ControlTimeouts timeouts_;
  ControlDispatch dispatch_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::steady_timer retry_;
  std::atomic<uint64_t> connections_{0};
  std::atomic<uint64_t> bad_frames_{0};
  std::atomic<uint64_t> refused_{0};
  // Shared with the sessions, which may outlive the server: at shutdown the loop, destroyed after
  // it, frees the sessions its pending handlers hold.
  std::shared_ptr<std::size_t> sessions_ = std::make_shared<std::size_t>(0);
  bool stopped_ = false;
};

}  // namespace pairwall::control
