#include "daemon/control/client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "daemon/control/framing.h"

namespace pairwall::control {

ControlClient::ControlClient(const std::string& path, std::chrono::milliseconds timeout) : path_(path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) throw std::runtime_error("control socket path too long: " + path);
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    std::string hint;
    if (err == ENOENT || err == ECONNREFUSED) hint = " (is pairwalld running? -s names another socket)";
    if (err == EACCES) hint = " (the socket's mode is [control] socket_mode: run as root or join its group)";
    throw std::runtime_error("cannot connect to " + path + ": " + std::strerror(err) + hint);
  }
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

ControlClient::~ControlClient() {
  if (fd_ >= 0) ::close(fd_);
}

Response ControlClient::call(const Request& request) {
  std::string frame;
  if (!encode_frame(request, kMaxRequestBytes, frame)) {
    throw std::runtime_error("request larger than " + std::to_string(kMaxRequestBytes) + " bytes");
  }
  return call_raw(frame);
}

Response ControlClient::call_raw(const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      // The daemon may have answered and closed already (an oversized frame): read what it said.
      if (errno == EPIPE || errno == ECONNRESET) break;
      throw std::runtime_error("sending to " + path_ + ": " + std::strerror(errno));
    }
    sent += static_cast<std::size_t>(n);
  }
  std::string body;
  char buf[65536];
  for (;;) {
    switch (reader_.next(body)) {
      case FrameReader::Status::Frame: {
        Response response;
        if (!decode_body(body, response)) throw std::runtime_error("malformed response from " + path_);
        return response;
      }
      case FrameReader::Status::TooLarge:
        throw std::runtime_error("response from " + path_ + " announces " +
                                 std::to_string(reader_.announced_length()) + " bytes, over the limit");
      case FrameReader::Status::NeedMore:
        break;
    }
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) throw std::runtime_error("timed out waiting for " + path_);
      if (errno == ECONNRESET) throw std::runtime_error(path_ + " closed the connection without an answer");
      throw std::runtime_error("reading from " + path_ + ": " + std::strerror(errno));
    }
    if (n == 0) throw std::runtime_error(path_ + " closed the connection without an answer");
    reader_.feed(std::string_view(buf, static_cast<std::size_t>(n)));
  }
}

}  // namespace pairwall::control
