#include "daemon/control/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <type_traits>

#include "daemon/control/accept_loop.h"
#include "daemon/control/framing.h"
#include "daemon/control/utf8.h"

namespace pairwall::control {
namespace asio = boost::asio;
using stream = asio::local::stream_protocol;

bool socket_answers(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

class ControlServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(stream::socket socket, ControlServer& server)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        server_(server),
        timeouts_(server.timeouts_),
        reader_(kMaxRequestBytes),
        open_sessions_(server.sessions_) {
    ++*open_sessions_;
  }
  ~Session() { --*open_sessions_; }

  void start() { read(); }

 private:
  using Clock = std::chrono::steady_clock;

  // Closes the connection at `deadline` unless the read or write under way completes first.
  void arm_timer(Clock::time_point deadline) {
    timer_.expires_at(deadline);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code ignored;
        self->socket_.close(ignored);
      }
    });
  }

  void read() {
    // Frames already buffered are served before reading again.
    if (serve_buffered()) return;
    // Each read may take the idle timeout; once a request has begun, it must also be whole by its
    // deadline.
    Clock::time_point deadline = Clock::now() + timeouts_.idle;
    if (reader_.buffered() > 0) deadline = std::min(deadline, request_began_ + timeouts_.request);
    arm_timer(deadline);
    socket_.async_read_some(asio::buffer(chunk_),
                            [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                              self->timer_.cancel();
                              if (ec) return;  // peer closed, timed out or the server stopped
                              self->last_read_ = Clock::now();
                              if (self->reader_.buffered() == 0) self->request_began_ = self->last_read_;
                              self->reader_.feed(std::string_view(self->chunk_.data(), n));
                              self->read();
                            });
  }

  // Serves the next complete frame, if any. Returns true when a response write is under way (the
  // write's completion continues the loop) or the session is ending.
  bool serve_buffered() {
    std::string body;
    switch (reader_.next(body)) {
      case FrameReader::Status::NeedMore:
        return false;
      case FrameReader::Status::TooLarge:
        ++server_.bad_frames_;
        fail("request frame of " + std::to_string(reader_.announced_length()) + " bytes exceeds the " +
             std::to_string(kMaxRequestBytes) + "-byte limit");
        return true;
      case FrameReader::Status::Frame:
        break;
    }
    // Frames are served before the next read: bytes left over came with the last one.
    if (reader_.buffered() > 0) request_began_ = last_read_;
    Request request;
    if (!decode_body(body, request)) {
      ++server_.bad_frames_;
      fail("malformed request: the frame body is not a pairwall.control.Request");
      return true;
    }
    Response response;
    const ControlDispatch& dispatch = server_.dispatch_;
    if (dispatch.immediate && handle(dispatch.immediate, request, response)) {
      answer(response);
      return true;
    }
    if (dispatch.handler_loop == nullptr) {
      handle(server_.handler_, request, response);
      answer(response);
      return true;
    }
    // No read or timer is pending meanwhile: the session waits for its answer, as a client does.
    asio::post(*dispatch.handler_loop,
               [self = shared_from_this(), handler = server_.handler_, request = std::move(request)] {
                 auto handled = std::make_shared<Response>();
                 handle(handler, request, *handled);
                 asio::post(self->socket_.get_executor(), [self, handled] { self->answer(*handled); });
               });
    return true;
  }

  template <typename Fn>
  static std::invoke_result_t<const Fn&, const Request&, Response&> handle(const Fn& fn,
                                                                           const Request& request,
                                                                           Response& response) {
    try {
      return fn(request, response);
    } catch (const std::exception& e) {
      // A request the service did not foresee failing (out of memory, say) ends as an error
      // answer, not as an exception through the event loop with the hooks in place.
      response.Clear();
      response.set_version(kControlProtocolVersion);
      response.set_error(std::string("request failed: ") + e.what());
      if constexpr (!std::is_void_v<std::invoke_result_t<const Fn&, const Request&, Response&>>) return true;
    }
  }

  void answer(Response& response) {
    // A string field that is not UTF-8 fails the whole parse at the client ("malformed response"),
    // and a rule file's label, its path or a rule's text quoting them may hold any bytes.
    make_strings_valid_utf8(response);
    out_.clear();
    if (!encode_frame(response, kMaxResponseBytes, out_)) {
      Response too_big;
      too_big.set_version(kControlProtocolVersion);
      too_big.set_error("response larger than " + std::to_string(kMaxResponseBytes >> 20) +
                        " MiB; narrow it (e.g. a states filter or limit)");
      encode_frame(too_big, kMaxResponseBytes, out_);
    }
    write(false);
  }

  // Answers with an error and closes: after a bad frame the stream is out of step.
  void fail(const std::string& message) {
    Response response;
    response.set_version(kControlProtocolVersion);
    response.set_error(message);
    out_.clear();
    encode_frame(response, kMaxResponseBytes, out_);
    write(true);
  }

  void write(bool close_after) {
    arm_timer(Clock::now() + timeouts_.idle);
    asio::async_write(socket_, asio::buffer(out_),
                      [self = shared_from_this(), close_after](boost::system::error_code ec, std::size_t) {
                        self->timer_.cancel();
                        if (ec || close_after) {
                          boost::system::error_code ignored;
                          self->socket_.shutdown(stream::socket::shutdown_both, ignored);
                          self->socket_.close(ignored);
                          return;
                        }
                        self->read();
                      });
  }

  stream::socket socket_;
  asio::steady_timer timer_;
  ControlServer& server_;
  const ControlTimeouts timeouts_;
  FrameReader reader_;
  Clock::time_point last_read_;
  Clock::time_point request_began_;  // of the request whose bytes the reader holds
  std::array<char, 16384> chunk_{};
  std::string out_;
  std::shared_ptr<std::size_t> open_sessions_;
};

ControlServer::ControlServer(asio::io_context& io, std::string path, uint32_t mode, Handler handler,
                             ControlTimeouts timeouts, ControlDispatch dispatch)
    : io_(io),
      path_(std::move(path)),
      handler_(std::move(handler)),
      timeouts_(timeouts),
      dispatch_(std::move(dispatch)),
      acceptor_(io),
      retry_(io) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(path_).parent_path();
  std::error_code fec;
  if (!dir.empty() && !fs::exists(dir, fec)) {
    fs::create_directories(dir, fec);
    if (fec) throw std::runtime_error("control socket: cannot create " + dir.string() + ": " + fec.message());
    // Group may traverse to reach a 0660 socket; others may not.
    ::chmod(dir.c_str(), 0750);
  }
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      throw std::runtime_error("control socket: " + path_ +
                               " exists and is not a socket; remove it or set [control] socket");
    }
    if (socket_answers(path_)) {
      throw std::runtime_error(
          "control socket: " + path_ +
          " answers: another pairwalld is running (stop it or set a different [control] socket)");
    }
    ::unlink(path_.c_str());
  }
  boost::system::error_code ec;
  acceptor_.open(stream(), ec);
  if (!ec) acceptor_.bind(stream::endpoint(path_), ec);
  if (ec) throw std::runtime_error("control socket: cannot bind " + path_ + ": " + ec.message());
  // chmod after bind: the window in between is covered by the directory's 0750.
  if (::chmod(path_.c_str(), static_cast<mode_t>(mode)) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(path_.c_str());
    throw std::runtime_error("control socket: cannot chmod " + path_ + ": " + why);
  }
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    ::unlink(path_.c_str());
    throw std::runtime_error("control socket: cannot listen on " + path_ + ": " + ec.message());
  }
}

// A fresh socket's send buffer takes the short answer whole: written without waiting, then closed.
void ControlServer::refuse(stream::socket socket) {
  Response response;
  response.set_version(kControlProtocolVersion);
  response.set_error("too many control connections (" + std::to_string(kMaxSessions) +
                     " open); close one and try again");
  std::string frame;
  encode_frame(response, kMaxResponseBytes, frame);
  boost::system::error_code ignored;
  socket.non_blocking(true, ignored);
  socket.write_some(asio::buffer(frame), ignored);
  socket.shutdown(stream::socket::shutdown_both, ignored);
  socket.close(ignored);
}

ControlServer::~ControlServer() {
  stop();
}

void ControlServer::start() {
  accept_connections(acceptor_, retry_, stopped_, [this](stream::socket socket) {
    ++connections_;
    if (*sessions_ >= kMaxSessions) {
      ++refused_;
      refuse(std::move(socket));
      return;
    }
    std::make_shared<Session>(std::move(socket), *this)->start();
  });
}

void ControlServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  retry_.cancel();
  ::unlink(path_.c_str());
}

}  // namespace pairwall::control
