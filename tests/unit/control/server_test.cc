// The control socket end to end over a real Unix socket: request/response round trips, the socket
// mode, refusing a second daemon, and the frames the server must refuse.
#include "daemon/control/server.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "daemon/control/client.h"
#include "daemon/control/framing.h"

using namespace pairwall::control;

namespace {

std::string header(uint32_t n) {
  return std::string{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                     static_cast<char>(n)};
}

// A server on its own io_context thread, answering rules_load with the path it was given.
struct Fixture {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pairwall-ctl-test-" + std::to_string(getpid())) / "run";
  std::string path = (dir / "control.sock").string();
  boost::asio::io_context io;
  std::unique_ptr<ControlServer> server;
  std::thread thread;
  int handled = 0;
  // Set by a test before it sends: fills the response further.
  std::function<void(Response&)> also;

  explicit Fixture(uint32_t mode = 0600, ControlTimeouts timeouts = {}) {
    std::filesystem::remove_all(dir.parent_path());
    server = std::make_unique<ControlServer>(
        io, path, mode,
        [this](const Request& req, Response& resp) {
          ++handled;
          resp.set_version(kControlProtocolVersion);
          if (req.has_rules_load()) {
            resp.set_ok(true);
            resp.mutable_rules_loaded()->set_path(req.rules_load().path());
          } else {
            resp.set_error("unsupported in this test");
          }
          if (also) also(resp);
        },
        timeouts);
    server->start();
    thread = std::thread([this] { io.run(); });
  }
  ~Fixture() {
    boost::asio::post(io, [this] { server->stop(); });
    io.stop();
    thread.join();
    server.reset();
    std::filesystem::remove_all(dir.parent_path());
  }
};

Request rules_load(const std::string& p) {
  Request r;
  r.mutable_rules_load()->set_path(p);
  return r;
}

// A connection the test writes to byte by byte, as ControlClient never would.
class RawConnection {
 public:
  explicit RawConnection(const std::string& path) : fd_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // False once the server closed the connection.
  bool send(std::string_view bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  // The next response, unless none is whole within `limit`.
  std::optional<Response> answer(std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    std::string body;
    while (reader_.next(body) != FrameReader::Status::Frame) {
      if (!wait_readable(until)) return std::nullopt;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) return std::nullopt;
      reader_.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    }
    Response r;
    if (!decode_body(body, r)) return std::nullopt;
    return r;
  }
  // Whether the server closed the connection within `limit`; what it answered before is read over.
  bool closed_within(std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (!wait_readable(until)) return false;
      char buf[4096];
      if (::recv(fd_, buf, sizeof buf, MSG_DONTWAIT) <= 0) return true;
    }
  }

 private:
  bool wait_readable(std::chrono::steady_clock::time_point until) const {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))) > 0;
  }

  int fd_;
  FrameReader reader_{kMaxResponseBytes};
};

std::string frame_of(const Request& r) {
  std::string out;
  REQUIRE(encode_frame(r, kMaxRequestBytes, out));
  return out;
}

}  // namespace

TEST_CASE("server: round trips several requests on one connection", "[server]") {
  Fixture f;
  ControlClient client(f.path);
  for (int i = 0; i < 3; ++i) {
    const Response r = client.call(rules_load("/p" + std::to_string(i)));
    CHECK(r.ok());
    CHECK(r.rules_loaded().path() == "/p" + std::to_string(i));
  }
  const Response refused = client.call(Request{});
  CHECK_FALSE(refused.ok());
  CHECK(refused.error() == "unsupported in this test");
  // Two requests written back to back are answered in order.
  std::string two;
  REQUIRE(encode_frame(rules_load("/a"), kMaxRequestBytes, two));
  REQUIRE(encode_frame(rules_load("/b"), kMaxRequestBytes, two));
  CHECK(client.call_raw(two).rules_loaded().path() == "/a");
  CHECK(client.call_raw("").rules_loaded().path() == "/b");
}

// proto3 refuses to parse a string field that is not UTF-8, so one such byte in a rule's label or a
// rule file's path (Latin-1) made every `rules show` and `stats` a "malformed response".
TEST_CASE("server: strings that are not UTF-8 reach the client with U+FFFD in their place", "[server]") {
  Fixture f;
  f.also = [](Response& r) {
    auto* rule = r.mutable_rules()->add_rules();
    rule->set_label("caf\xe9");
    rule->set_text("pass all label \"caf\xe9\"");
    r.mutable_rules()->set_rules_file("/etc/pairwall/r\xe8gles.conf");
    rule = r.mutable_rules()->add_rules();
    rule->set_label("B\xc3\xbcro");  // already UTF-8: kept as it is
  };
  ControlClient client(f.path);
  const Response r = client.call(rules_load("/x"));
  REQUIRE(r.rules().rules_size() == 2);
  CHECK(r.rules().rules(0).label() == "caf\xef\xbf\xbd");
  CHECK(r.rules().rules(0).text() == "pass all label \"caf\xef\xbf\xbd\"");
  CHECK(r.rules().rules_file() == "/etc/pairwall/r\xef\xbf\xbdgles.conf");
  CHECK(r.rules().rules(1).label() == "B\xc3\xbcro");
}

// A file's name, or the rules of `anchors load NAME -f -` (a comment), may be Latin-1: such a
// request must reach the service, not be refused as malformed.
TEST_CASE("server: a request's path or rule text need not be UTF-8", "[server]") {
  Fixture f;
  ControlClient client(f.path);
  const Response r = client.call(rules_load("/etc/pairwall/r\xe8gles.conf"));
  CHECK(r.ok());
  CHECK(r.rules_loaded().path() == "/etc/pairwall/r\xef\xbf\xbdgles.conf");  // answered as UTF-8
  Request anchor;
  anchor.mutable_anchor_load()->set_name("web");
  anchor.mutable_anchor_load()->set_path("(standard input)");
  anchor.mutable_anchor_load()->set_text("# B\xfcro\npass all\n");
  CHECK(client.call(anchor).error() == "unsupported in this test");  // parsed, and handled
  CHECK(f.handled == 2);
  CHECK(f.server->bad_frames() == 0);
}

TEST_CASE("server: applies the socket mode and creates the directory", "[server]") {
  Fixture f(0640);
  struct stat st {};
  REQUIRE(::stat(f.path.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0640);
  REQUIRE(::stat(f.dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0750);
}

TEST_CASE("server: garbage is answered with an error and the connection closed", "[server]") {
  Fixture f;
  ControlClient client(f.path);
  const Response r = client.call_raw(header(3) + std::string("\x08\xff\xff", 3));
  CHECK_FALSE(r.ok());
  CHECK(r.error() == "malformed request: the frame body is not a pairwall.control.Request");
  CHECK_THROWS_WITH(client.call(rules_load("/x")), Catch::Contains("closed the connection"));
  CHECK(f.server->bad_frames() == 1);
  // The server keeps serving others.
  ControlClient again(f.path);
  CHECK(again.call(rules_load("/y")).ok());
}

TEST_CASE("server: an oversized frame is refused before its body is read", "[server]") {
  Fixture f;
  ControlClient client(f.path);
  const Response r = client.call_raw(header(static_cast<uint32_t>(kMaxRequestBytes) + 1));
  CHECK_FALSE(r.ok());
  CHECK(r.error() == "request frame of 16777217 bytes exceeds the 16777216-byte limit");
  CHECK_THROWS(client.call(rules_load("/x")));
  CHECK(f.handled == 0);
}

TEST_CASE("server: connections beyond the bound are answered with an error and closed", "[server]") {
  Fixture f;
  std::vector<std::unique_ptr<ControlClient>> idle;
  for (std::size_t i = 0; i < ControlServer::kMaxSessions; ++i) {
    idle.push_back(std::make_unique<ControlClient>(f.path));
    REQUIRE(idle.back()->call(rules_load("/idle")).ok());  // its session is open
  }
  ControlClient extra(f.path);
  const Response r = extra.call(rules_load("/x"));
  CHECK_FALSE(r.ok());
  CHECK(r.error() == "too many control connections (16 open); close one and try again");
  CHECK(f.server->refused() == 1);
  // Once one goes (its session ends when the server reads the close), another is served.
  idle.pop_back();
  Response next;
  for (int attempt = 0; attempt < 50 && !next.ok(); ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    next = ControlClient(f.path).call(rules_load("/y"));
  }
  CHECK(next.rules_loaded().path() == "/y");
}

TEST_CASE("server: a second daemon on the same socket is refused; a stale socket is replaced", "[server]") {
  Fixture f;
  boost::asio::io_context io2;
  CHECK_THROWS_WITH(ControlServer(io2, f.path, 0600, [](const Request&, Response&) {}),
                    Catch::Contains("answers: another pairwalld is running"));
  // The first server is untouched.
  ControlClient client(f.path);
  CHECK(client.call(rules_load("/still")).ok());

  // A socket file nobody listens on (a killed daemon's) is removed and rebound.
  const std::string stale = (f.dir / "stale.sock").string();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, stale.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  ::close(fd);
  CHECK_NOTHROW(ControlServer(io2, stale, 0600, [](const Request&, Response&) {}));

  // A regular file in the way is not deleted.
  const std::string file = (f.dir / "file.sock").string();
  {
    std::FILE* fp = std::fopen(file.c_str(), "w");
    std::fclose(fp);
  }
  CHECK_THROWS_WITH(ControlServer(io2, file, 0600, [](const Request&, Response&) {}),
                    Catch::Contains("exists and is not a socket"));
  CHECK(std::filesystem::exists(file));
}

TEST_CASE("client: a missing socket gives an actionable message", "[server]") {
  CHECK_THROWS_WITH(ControlClient("/nonexistent/pairwall.sock"),
                    Catch::Contains("cannot connect to /nonexistent/pairwall.sock") &&
                        Catch::Contains("is pairwalld running?"));
}

// A client that trickles in a byte now and then, each within the idle timeout, would hold one of
// the kMaxSessions for ever; 16 of them would lock every operator out.
TEST_CASE("server: a request not whole by its deadline is cut off, however often its bytes come",
          "[server]") {
  using std::chrono::milliseconds;
  Fixture f(0600, ControlTimeouts{.idle = milliseconds(2000), .request = milliseconds(300)});
  RawConnection c(f.path);
  const std::string request = frame_of(rules_load("/slow/" + std::string(100, 'x')));
  const auto began = std::chrono::steady_clock::now();
  bool closed = false;
  for (std::size_t i = 0; i < request.size() && !closed; ++i) {
    closed = !c.send(request.substr(i, 1)) || c.closed_within(milliseconds(50));
  }
  const auto took = std::chrono::steady_clock::now() - began;
  CHECK(closed);
  CHECK(took >= milliseconds(300));
  CHECK(took < milliseconds(1500));
  CHECK(f.handled == 0);
}

TEST_CASE("server: each request has a deadline of its own, and an idle connection is closed as before",
          "[server]") {
  using std::chrono::milliseconds;
  Fixture f(0600, ControlTimeouts{.idle = milliseconds(400), .request = milliseconds(300)});
  RawConnection c(f.path);
  // Three requests, each sent in two halves 150 ms apart: 450 ms and more on one connection.
  const std::string request = frame_of(rules_load("/in/halves"));
  for (int i = 0; i < 3; ++i) {
    REQUIRE(c.send(request.substr(0, request.size() / 2)));
    std::this_thread::sleep_for(milliseconds(150));
    REQUIRE(c.send(request.substr(request.size() / 2)));
    const std::optional<Response> r = c.answer(milliseconds(1000));
    REQUIRE(r);
    CHECK(r->rules_loaded().path() == "/in/halves");
  }
  // Then nothing: closed once idle, not at once.
  const auto began = std::chrono::steady_clock::now();
  CHECK(c.closed_within(milliseconds(1500)));
  CHECK(std::chrono::steady_clock::now() - began >= milliseconds(350));
  CHECK(f.handled == 3);
}

// The daemon's arrangement: the socket on one loop, the handler on another (the control loop). A
// request the immediate handler takes is answered while the handler's loop is held, as a health
// check must be while a rule set compiles; the others wait for that loop, and are answered from it
// in order.
TEST_CASE("server: immediate requests are answered while the handler's loop is busy", "[server]") {
  using std::chrono::milliseconds;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pairwall-ctl-dispatch-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  const std::string path = (dir / "control.sock").string();
  boost::asio::io_context socket_loop;
  boost::asio::io_context handler_loop;
  auto handler_work = boost::asio::make_work_guard(handler_loop);
  std::thread::id handler_thread;
  std::atomic<int> off_handler_thread{0};
  std::vector<std::string> handled_paths;

  ControlDispatch dispatch;
  dispatch.immediate = [](const Request& req, Response& resp) {
    if (!req.has_health()) return false;
    resp.set_version(kControlProtocolVersion);
    resp.set_ok(true);
    resp.mutable_health()->set_healthy(true);
    return true;
  };
  dispatch.handler_loop = &handler_loop;
  ControlServer server(
      socket_loop, path, 0600,
      [&](const Request& req, Response& resp) {
        // Counted here, checked on the test's thread: Catch's assertions are not thread-safe.
        if (std::this_thread::get_id() != handler_thread) ++off_handler_thread;
        handled_paths.push_back(req.rules_load().path());
        resp.set_version(kControlProtocolVersion);
        resp.set_ok(true);
        resp.mutable_rules_loaded()->set_path(req.rules_load().path());
      },
      ControlTimeouts{}, std::move(dispatch));
  server.start();
  std::thread socket_thread([&] { socket_loop.run(); });

  // The handler's loop is held (a compile) until `release` is set.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  boost::asio::post(handler_loop, [released] { released.wait(); });
  std::thread handler_runner([&] { handler_loop.run(); });
  handler_thread = handler_runner.get_id();

  RawConnection loader(path);
  REQUIRE(loader.send(frame_of(rules_load("/first")) + frame_of(rules_load("/second"))));
  CHECK_FALSE(loader.answer(milliseconds(200)));  // waiting for the held loop

  Request health;
  health.mutable_health();
  RawConnection checker(path);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(checker.send(frame_of(health)));
    const std::optional<Response> r = checker.answer(milliseconds(1000));
    REQUIRE(r);
    CHECK(r->health().healthy());
  }
  CHECK(handled_paths.empty());

  release.set_value();
  for (const char* expected : {"/first", "/second"}) {
    const std::optional<Response> r = loader.answer(milliseconds(2000));
    REQUIRE(r);
    CHECK(r->rules_loaded().path() == expected);
  }

  boost::asio::post(socket_loop, [&] {
    server.stop();
    socket_loop.stop();
  });
  socket_thread.join();
  handler_work.reset();
  handler_loop.stop();
  handler_runner.join();
  CHECK(handled_paths == std::vector<std::string>{"/first", "/second"});
  CHECK(off_handler_thread == 0);
  std::filesystem::remove_all(dir);
}
