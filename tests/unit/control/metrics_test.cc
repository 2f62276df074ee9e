// Prometheus text rendering: family headers, labels and escaping, grouping across collectors,
// and the core daemon metrics from a counters snapshot.
#include "daemon/control/metrics.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/dataplane.h"
#include "daemon/control/metrics_server.h"

using namespace pairwall::control;
using T = MetricWriter::Type;

TEST_CASE("metrics: a family renders HELP, TYPE and samples", "[metrics]") {
  MetricWriter w;
  w.family("pairwall_x_total", T::Counter, "Things counted.");
  w.sample(uint64_t{3});
  w.sample({{"reason", "short"}}, uint64_t{5});
  w.sample({{"a", "1"}, {"b", "2"}}, uint64_t{18446744073709551615ull});
  w.family("pairwall_g", T::Gauge, "A gauge.");
  w.sample(0.5);
  CHECK(w.text() ==
        "# HELP pairwall_x_total Things counted.\n"
        "# TYPE pairwall_x_total counter\n"
        "pairwall_x_total 3\n"
        "pairwall_x_total{reason=\"short\"} 5\n"
        "pairwall_x_total{a=\"1\",b=\"2\"} 18446744073709551615\n"
        "# HELP pairwall_g A gauge.\n"
        "# TYPE pairwall_g gauge\n"
        "pairwall_g 0.5\n");
}

TEST_CASE("metrics: label values and help are escaped", "[metrics]") {
  MetricWriter w;
  w.family("m", T::Gauge, "line1\nback\\slash \"quoted\"");
  w.sample({{"rule", "pass \"x\" \\ y\nz"}}, uint64_t{1});
  CHECK(w.text() ==
        "# HELP m line1\\nback\\\\slash \"quoted\"\n"
        "# TYPE m gauge\n"
        "m{rule=\"pass \\\"x\\\" \\\\ y\\nz\"} 1\n");
}

// The format takes UTF-8 only, and Prometheus refuses a whole scrape over one label value that is
// not: a rule file written in Latin-1 must not take every metric of the node with it.
TEST_CASE("metrics: label values that are not UTF-8 become U+FFFD", "[metrics]") {
  const std::string fffd = "\xef\xbf\xbd";
  struct Case {
    std::string in;
    std::string out;
  };
  const Case cases[] = {
      {"B\xc3\xbcro \xe2\x82\xac \xf0\x9f\x94\xa5", "B\xc3\xbcro \xe2\x82\xac \xf0\x9f\x94\xa5"},  // valid
      {"caf\xe9", "caf" + fffd},                                                                   // Latin-1
      {"a\xe2\x82", "a" + fffd + fffd},                 // cut short
      {"\xc0\xaf", fffd + fffd},                        // overlong '/'
      {"\xed\xa0\x80", fffd + fffd + fffd},             // a surrogate
      {"\xf4\x90\x80\x80", fffd + fffd + fffd + fffd},  // above U+10FFFF
      {"\xff\"x", fffd + "\\\"x"},
  };
  for (const auto& c : cases) {
    MetricWriter w;
    w.family("m", T::Gauge, "h");
    w.sample({{"label", c.in}}, uint64_t{1});
    CHECK(w.text() == "# HELP m h\n# TYPE m gauge\nm{label=\"" + c.out + "\"} 1\n");
  }
}

TEST_CASE("metrics: special doubles", "[metrics]") {
  MetricWriter w;
  w.family("d", T::Gauge, "h");
  w.sample(std::numeric_limits<double>::infinity());
  w.sample(-std::numeric_limits<double>::infinity());
  w.sample(std::numeric_limits<double>::quiet_NaN());
  w.sample(0.1);
  CHECK(w.text() == "# HELP d h\n# TYPE d gauge\nd +Inf\nd -Inf\nd NaN\nd 0.1\n");
}

TEST_CASE("metrics: a family started twice stays one group with one TYPE line", "[metrics]") {
  MetricsRegistry reg;
  reg.add("a", [](MetricWriter& w) {
    w.family("shared_total", T::Counter, "first help wins");
    w.sample({{"from", "a"}}, uint64_t{1});
    w.family("only_a", T::Gauge, "a");
    w.sample(uint64_t{2});
  });
  reg.add("b", [](MetricWriter& w) {
    w.family("shared_total", T::Counter, "second help");
    w.sample({{"from", "b"}}, uint64_t{3});
  });
  CHECK(reg.size() == 2);
  CHECK(reg.render() ==
        "# HELP shared_total first help wins\n"
        "# TYPE shared_total counter\n"
        "shared_total{from=\"a\"} 1\n"
        "shared_total{from=\"b\"} 3\n"
        "# HELP only_a a\n"
        "# TYPE only_a gauge\n"
        "only_a 2\n");
}

TEST_CASE("metrics: name validation", "[metrics]") {
  CHECK(MetricWriter::valid_name("pairwall_packets_total"));
  CHECK(MetricWriter::valid_name("a:b"));
  CHECK_FALSE(MetricWriter::valid_name("a:b", true));
  CHECK_FALSE(MetricWriter::valid_name("1abc"));
  CHECK_FALSE(MetricWriter::valid_name("a-b"));
  CHECK_FALSE(MetricWriter::valid_name(""));
}

TEST_CASE("metrics: core daemon metrics from a snapshot", "[metrics]") {
  namespace engine = pairwall::engine;
  CountersSnapshot s;
  s.packets = 100;
  s.bytes = 6400;
  s.reasons[static_cast<std::size_t>(engine::Reason::Match)] = 60;
  s.reasons[static_cast<std::size_t>(engine::Reason::State)] = 30;
  s.reasons[static_cast<std::size_t>(engine::Reason::BadIpHeader)] = 4;
  s.reasons[static_cast<std::size_t>(engine::Reason::RuleBlock)] = 6;
  s.states = 12;
  s.state_limit = 100000;
  s.timeout_scale = 0.5;
  s.source_nodes = 3;
  s.source_node_limit = 10000;
  s.source_overloads = 4;
  s.source_overloads_lost = 1;
  s.source_limited = {5, 0, 2, 7};
  s.rules.push_back({0, "", "block all", "", "pf.conf:1", 6, 6, 384, 0, 0});
  s.rules.push_back(
      {1, "", "pass proto tcp to port 80 label \"web\"", "web", "pf.conf:2", 60, 90, 5760, 12, 15});
  s.rules.push_back({0, "ssh", "pass proto tcp to port 22", "", "pf.conf:4", 2, 3, 180, 1, 1});
  s.translations.push_back(
      {0, "", "nat on wan0 from 10.0.0.0/8 to any -> 192.0.2.1", "", "pf.conf:3", 5, 40, 2400, 2, 5});
  s.scrubs.push_back({0, "", "scrub in all", "", "pf.conf:1", 70, 70, 9100, 0, 0});
  s.scrubs.push_back({1, "", "no scrub in from 10.0.0.9 to any", "", "pf.conf:2", 3, 3, 180, 0, 0});
  s.queues.push_back({3, 100, 6400, 7, 8, 9, 1, 4096, 2'097'152});
  CHECK(s.drops() == 10);

  MetricWriter w;
  render_core_metrics(s, w);
  const std::string text = w.text();
  auto has = [&](const std::string& line) {
    INFO(line);
    CHECK(text.find(line + "\n") != std::string::npos);
  };
  has("# TYPE pairwall_packets_total counter");
  has("pairwall_packets_total 100");
  has("pairwall_bytes_total 6400");
  has("# TYPE pairwall_verdicts_total counter");
  has("pairwall_verdicts_total{reason=\"" + std::string(engine::reason_name(engine::Reason::Match)) +
      "\"} 60");
  has("pairwall_verdicts_total{reason=\"" + std::string(engine::reason_name(engine::Reason::BadIpHeader)) +
      "\"} 4");
  has("pairwall_verdicts_total{reason=\"" + std::string(engine::reason_name(engine::Reason::Short)) +
      "\"} 0");
  has("# TYPE pairwall_states gauge");
  has("pairwall_states 12");
  has("pairwall_state_limit 100000");
  has("# TYPE pairwall_timeout_scale gauge");
  has("pairwall_timeout_scale 0.5");
  has("# TYPE pairwall_source_nodes gauge");
  has("pairwall_source_nodes 3");
  has("pairwall_source_node_limit 10000");
  has("# TYPE pairwall_source_overloads_total counter");
  has("pairwall_source_overloads_total 4");
  has("pairwall_source_overloads_lost_total 1");
  has("# TYPE pairwall_source_limited_total counter");
  has("pairwall_source_limited_total{limit=\"max-src-states\"} 5");
  has("pairwall_source_limited_total{limit=\"max-src-nodes\"} 0");
  has("pairwall_source_limited_total{limit=\"max-src-conn\"} 2");
  has("pairwall_source_limited_total{limit=\"max-src-conn-rate\"} 7");
  has("pairwall_rule_packets_total{rule=\"0\"} 6");
  // A rule's label rides along where it has one.
  has("pairwall_rule_packets_total{rule=\"1\",label=\"web\"} 90");
  has("pairwall_rule_bytes_total{rule=\"1\",label=\"web\"} 5760");
  has("pairwall_rule_states{rule=\"1\",label=\"web\"} 12");
  has("pairwall_rule_packets_total{rule=\"0\",anchor=\"ssh\"} 3");  // @0 of anchor "ssh", not of the main set
  // Translation rules by their own @N.
  has("# TYPE pairwall_translation_evaluations_total counter");
  has("pairwall_translation_evaluations_total{rule=\"0\"} 5");
  has("pairwall_translation_packets_total{rule=\"0\"} 40");
  has("pairwall_translation_bytes_total{rule=\"0\"} 2400");
  has("# TYPE pairwall_translation_states gauge");
  has("pairwall_translation_states{rule=\"0\"} 2");
  has("# TYPE pairwall_scrub_packets_total counter");
  has("pairwall_scrub_packets_total{rule=\"0\"} 70");
  has("pairwall_scrub_packets_total{rule=\"1\"} 3");
  has("pairwall_scrub_bytes_total{rule=\"0\"} 9100");
  has("pairwall_scrub_bytes_total{rule=\"1\"} 180");
  has("pairwall_queue_packets_total{queue=\"3\"} 100");
  has("pairwall_queue_drops_total{queue=\"3\"} 7");
  has("pairwall_queue_overruns_total{queue=\"3\"} 8");
  has("pairwall_queue_uninspected_total{queue=\"3\"} 9");
  has("pairwall_queue_verdict_errors_total{queue=\"3\"} 1");
  has("# TYPE pairwall_queue_max_len gauge");
  has("pairwall_queue_max_len{queue=\"3\"} 4096");
  has("pairwall_queue_rcvbuf_bytes{queue=\"3\"} 2097152");
  // Every reason is exported, zero or not, so dashboards see the whole set from the start.
  std::size_t verdict_lines = 0;
  for (std::size_t pos = 0; (pos = text.find("pairwall_verdicts_total{", pos)) != std::string::npos; ++pos) {
    ++verdict_lines;
  }
  CHECK(verdict_lines == engine::kReasonCount);
}

TEST_CASE("metrics: the HTTP responder", "[metrics]") {
  int renders = 0;
  auto render = [&] {
    ++renders;
    return std::string("m 1\n");
  };
  const std::string ok = http_metrics_response("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", render);
  CHECK(ok ==
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: 4\r\n"
        "Connection: close\r\n\r\nm 1\n");
  CHECK(renders == 1);
  CHECK(http_metrics_response("GET /metrics?x=1 HTTP/1.0\r\n\r\n", render).rfind("HTTP/1.0 200 OK", 0) == 0);
  const std::string head = http_metrics_response("HEAD /metrics HTTP/1.0\r\n\r\n", render);
  CHECK(head.rfind("HTTP/1.0 200 OK", 0) == 0);
  CHECK(head.substr(head.size() - 4) == "\r\n\r\n");  // headers only
  CHECK(http_metrics_response("GET / HTTP/1.0\r\n\r\n", render).rfind("HTTP/1.0 404 Not Found", 0) == 0);
  CHECK(http_metrics_response("GET /metricsx HTTP/1.0\r\n\r\n", render).rfind("HTTP/1.0 404", 0) == 0);
  const std::string post = http_metrics_response("POST /metrics HTTP/1.0\r\n\r\n", render);
  CHECK(post.rfind("HTTP/1.0 405", 0) == 0);
  CHECK(post.find("\r\nAllow: GET, HEAD\r\n") != std::string::npos);  // RFC 9110 15.5.6
  CHECK(http_metrics_response("garbage\r\n\r\n", render).rfind("HTTP/1.0 400", 0) == 0);
  CHECK(http_metrics_response("GET /metrics FTP/1.0\r\n\r\n", render).rfind("HTTP/1.0 400", 0) == 0);
  CHECK(renders == 3);  // only the 200s rendered
}

// The daemon's loop runs the collectors: one that throws must fail the scrape, not end the daemon.
TEST_CASE("metrics: a collector that throws answers 500", "[metrics]") {
  const auto failing = []() -> std::string { throw std::runtime_error("no memory"); };
  std::string reply;
  REQUIRE_NOTHROW(reply = http_metrics_response("GET /metrics HTTP/1.0\r\n\r\n", failing));
  CHECK(reply ==
        "HTTP/1.0 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: 26\r\n"
        "Connection: close\r\n\r\nmetrics failed: no memory\n");
}

namespace {

// GET /metrics at `at` while `io` runs the server: the whole reply, "" when the connection is refused.
std::string scrape(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& at,
                   const std::string& request = "GET /metrics HTTP/1.0\r\n\r\n",
                   boost::asio::ip::tcp::socket* opened = nullptr) {
  namespace asio = boost::asio;
  asio::ip::tcp::socket own(io);
  asio::ip::tcp::socket& s = opened != nullptr ? *opened : own;
  boost::system::error_code ec;
  if (opened == nullptr) {
    s.connect(at, ec);
    if (ec) return {};
    const timeval give_up{5, 0};
    ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &give_up, sizeof give_up);
  }
  asio::write(s, asio::buffer(request));
  std::string reply;
  // recv() itself, whose SO_RCVTIMEO ends the wait: asio's read would poll on past it.
  std::thread reader([&] {
    std::array<char, 512> buf{};
    for (;;) {
      const ssize_t n = ::recv(s.native_handle(), buf.data(), buf.size(), 0);
      if (n <= 0) break;
      reply.append(buf.data(), static_cast<std::size_t>(n));
    }
  });
  io.restart();  // run_for() stops the context once it has no work: a stopped server left it none
  io.run_for(std::chrono::milliseconds(300));
  reader.join();
  return reply;
}

}  // namespace

// Idle connections hold the server's descriptors for seconds each: past kMaxSessions open at once
// a connection is closed as soon as it is accepted, and scrapes work again as the idle ones go.
TEST_CASE("metrics: the HTTP server bounds its open connections", "[metrics]") {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  asio::io_context io;
  MetricsServer server(io, "127.0.0.1", 0, [] { return std::string("m 1\n"); });
  server.start();
  const tcp::endpoint at(asio::ip::make_address("127.0.0.1"), server.port());
  std::vector<tcp::socket> idle;
  for (std::size_t i = 0; i < MetricsServer::kMaxSessions + 8; ++i) {
    idle.emplace_back(io);
    idle.back().connect(at);
  }
  io.run_for(std::chrono::milliseconds(300));
  CHECK(server.refused() == 8);

  idle.clear();  // the idle clients go: their sessions end
  io.run_for(std::chrono::milliseconds(300));
  CHECK(scrape(io, at).rfind("HTTP/1.0 200 OK", 0) == 0);
  CHECK(server.scrapes() == 1);
}

// A reload's [metrics] listen: the server moves to the new address, and a scrape under way on the
// old one still gets its answer.
TEST_CASE("metrics: the HTTP server moves to another address, scrapes under way answered", "[metrics]") {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  asio::io_context io;
  MetricsServer server(io, "127.0.0.1", 0, [] { return std::string("m 1\n"); });
  server.start();
  const uint16_t port = server.port();
  const auto at = [](const char* host, uint16_t p) { return tcp::endpoint(asio::ip::make_address(host), p); };
  REQUIRE(scrape(io, at("127.0.0.1", port)).rfind("HTTP/1.0 200 OK", 0) == 0);

  // A scraper half through its request when the server moves.
  tcp::socket slow(io);
  slow.connect(at("127.0.0.1", port));
  const timeval give_up{5, 0};
  ::setsockopt(slow.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &give_up, sizeof give_up);
  asio::write(slow, asio::buffer(std::string("GET /metrics HTTP/1.0\r\n")));
  io.run_for(std::chrono::milliseconds(100));

  // Another address, the same port: both can be bound at once.
  server.listen_on("127.0.0.2", port);
  CHECK(scrape(io, at("127.0.0.1", port)).empty());
  CHECK(scrape(io, at("127.0.0.2", port)).rfind("HTTP/1.0 200 OK", 0) == 0);
  CHECK(scrape(io, at("127.0.0.1", port), "\r\n", &slow).rfind("HTTP/1.0 200 OK", 0) == 0);

  // Every address on the same port: the running listener holds it, and closes first.
  server.listen_on("0.0.0.0", port);
  CHECK(scrape(io, at("127.0.0.1", port)).rfind("HTTP/1.0 200 OK", 0) == 0);
  CHECK(server.port() == port);

  // A port another socket holds: refused, and the server listens where it did.
  tcp::acceptor other(io, at("127.0.0.1", 0));
  const uint16_t taken = other.local_endpoint().port();
  CHECK_THROWS_WITH(server.listen_on("127.0.0.1", taken),
                    Catch::Contains("metrics: cannot listen on 127.0.0.1:" + std::to_string(taken)));
  CHECK(scrape(io, at("127.0.0.1", port)).rfind("HTTP/1.0 200 OK", 0) == 0);
  CHECK_THROWS_WITH(server.listen_on("no-address", port), "metrics: 'no-address' is not an IP address");

  // Stopped (a reload that turns metrics off), and listening again (one that turns them on).
  server.stop();
  io.run_for(std::chrono::milliseconds(50));
  CHECK(scrape(io, at("127.0.0.1", port)).empty());
  server.listen_on("127.0.0.1", port);
  CHECK(scrape(io, at("127.0.0.1", port)).rfind("HTTP/1.0 200 OK", 0) == 0);
  CHECK(server.scrapes() == 6);
}
