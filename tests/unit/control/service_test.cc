// The control commands against a real engine fed crafted packets: status, stats, rules load
// (broken and good), rules show, states with filters, flush, health, failover routing.
#include "daemon/control/service.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "daemon/control/framing.h"
#include "tests/unit/support/packet_builder.h"

using namespace pairwall;
using namespace pairwall::control;
using engine::Millis;
using test::Bytes;
using test::PacketBuilder;
namespace tcpflag = engine::tcpflag;

namespace {

struct FakeDataPlane : DataPlane {
  explicit FakeDataPlane(engine::Engine& e) : worker(e) {}
  std::vector<const engine::Worker*> workers() const override { return {&worker}; }
  std::vector<QueueCounters> queues() const override { return {QueueCounters{5, 10, 1000, 1, 2, 3, 0}}; }
  engine::Worker worker;
};

struct FakeSync : SyncControl {
  void fill_status(SyncStatus* s) override { s->set_bulk_expected(resyncs); }
  std::string request_resync() override {
    if (!refusal.empty()) return refusal;
    ++resyncs;
    return {};
  }
  void share_table(const std::string& name, std::vector<engine::AgedTableEntry> entries) override {
    shared.emplace_back(name, std::move(entries));
  }
  int resyncs = 0;
  std::string refusal;
  std::vector<std::pair<std::string, std::vector<engine::AgedTableEntry>>> shared;
};

struct FakeFailover : FailoverControl {
  void fill_status(FailoverStatus* s) override {
    s->set_role(role);
    s->set_demotion(demotion);
  }
  std::string demote(uint32_t n) override {
    demotion += n;
    return {};
  }
  std::string promote(uint32_t n) override {
    if (n > demotion)
      return "demotion is " + std::to_string(demotion) + ", cannot promote by " + std::to_string(n);
    demotion -= n;
    return {};
  }
  std::string set_role(FailoverStatus::Role r) override {
    role = r;
    return {};
  }
  HealthResult healthy() override {
    ++health_asked;
    return {demotion == 0, demotion == 0 ? "" : "demoted by the administrator"};
  }
  FailoverStatus::Role role = FailoverStatus::BACKUP;
  int health_asked = 0;
  uint32_t demotion = 0;
};

struct Daemon {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pairwall-service-test-" + std::to_string(getpid()));
  Config config;
  engine::Engine engine;
  FakeDataPlane data_plane{engine};
  Millis now{10'000};
  ControlService service{config, engine, [this] { return now; }};

  Daemon() : engine(engine_config()) {
    std::filesystem::create_directories(dir);
    config.file = (dir / "pairwall.toml").string();
    config.node.id = 3;
    config.node.name = "fw-test";
    config.rules.file = write("pf.conf", "block all\npass proto tcp to port 80\npass proto udp to port 53\n");
    service.set_data_plane(&data_plane);
  }
  ~Daemon() { std::filesystem::remove_all(dir); }

  static engine::EngineConfig engine_config() {
    engine::EngineConfig c;
    c.node_id = 3;
    c.shards = 4;
    c.event_ring_capacity = 1024;
    return c;
  }

  std::string write(const std::string& name, const std::string& text) {
    const auto p = (dir / name).string();
    std::ofstream(p) << text;
    return p;
  }

  engine::Verdict send(Bytes p) {
    engine::PacketMeta meta;
    meta.hook = engine::Hook::Input;  // one rule pass per packet, so rule counters count packets
    return engine.process(data_plane.worker, p, meta, now);
  }

  Response call(const Request& r) {
    Response resp;
    service.handle(r, resp);
    return resp;
  }
};

Bytes syn(const std::string& src, uint16_t sport, const std::string& dst, uint16_t dport) {
  return PacketBuilder().ipv4(src, dst).tcp(sport, dport).flags(tcpflag::kSyn).seq(1000).build();
}

Request make(void (*fill)(Request&)) {
  Request r;
  r.set_version(kControlProtocolVersion);
  fill(r);
  return r;
}

uint64_t reason_count(const Stats& s, engine::Reason reason) {
  for (const auto& rc : s.reasons()) {
    if (rc.reason() == engine::reason_name(reason)) return rc.count();
  }
  return UINT64_MAX;
}

}  // namespace

TEST_CASE("service: rules load, stats, states, reload and flush", "[service]") {
  Daemon d;
  auto loaded = d.service.load_rules("");
  INFO(loaded.error);
  REQUIRE(loaded.ok);
  CHECK(loaded.rule_count == 3);

  CHECK(d.send(syn("10.0.0.1", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  CHECK(d.send(syn("10.0.0.1", 40001, "10.9.0.1", 81)).action == engine::Verdict::Action::Drop);
  CHECK(d.send(PacketBuilder().ipv4("10.0.0.1", "10.9.0.1").tcp(1, 2).ihl(3).build()).action ==
        engine::Verdict::Action::Drop);
  CHECK(d.send(PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").udp(5353, 53).payload(10).build()).action ==
        engine::Verdict::Action::Accept);

  SECTION("status") {
    const Response r = d.call(make([](Request& q) { q.mutable_status(); }));
    REQUIRE(r.ok());
    const Status& s = r.status();
    CHECK(s.node_id() == 3);
    CHECK(s.node_name() == "fw-test");
    CHECK(s.pid() == static_cast<uint32_t>(getpid()));
    CHECK(s.rules_file() == d.config.rules.file);
    CHECK(s.rule_count() == 3);
    CHECK(s.rule_reloads() == 1);
    CHECK(s.rules_digest() == d.engine.rules()->digest());
    CHECK(s.rules_digest() != 0);
    CHECK(s.states() == 2);
    CHECK(s.packets() == 4);
    CHECK(s.drops() == 2);
    REQUIRE(s.queues_size() == 1);
    CHECK(s.queues(0).queue() == 5);
    CHECK(s.queues(0).overruns() == 2);
    CHECK(s.rules_loaded_unix_ms() > 1'600'000'000'000ull);
  }

  SECTION("stats sum the workers' reasons and carry rule and queue counters") {
    const Response r = d.call(make([](Request& q) { q.mutable_stats(); }));
    REQUIRE(r.ok());
    const Stats& s = r.stats();
    CHECK(static_cast<std::size_t>(s.reasons_size()) == engine::kReasonCount);
    CHECK(reason_count(s, engine::Reason::Match) == 2);
    CHECK(reason_count(s, engine::Reason::RuleBlock) == 1);
    CHECK(reason_count(s, engine::Reason::BadIpHeader) == 1);
    CHECK(reason_count(s, engine::Reason::Short) == 0);
    REQUIRE(s.rules_size() == 3);
    CHECK(s.rules(1).number() == 1);
    CHECK(s.rules(1).packets() == 1);
    CHECK(s.rules(1).states_current() == 1);
    CHECK(s.rules(0).packets() == 1);  // the blocked SYN
    CHECK(s.packets() == 4);
    CHECK(s.states() == 2);
  }

  SECTION("rules zero sets the rules' counters to zero, and they count on from there (pfctl -z)") {
    const Response z = d.call(make([](Request& q) { q.mutable_rules_zero(); }));
    REQUIRE(z.ok());
    CHECK(z.rules_zeroed().rules() == 3);
    Response r = d.call(make([](Request& q) { q.mutable_rules_show(); }));
    REQUIRE(r.rules().rules_size() == 3);
    for (const auto& rule : r.rules().rules()) {
      CHECK(rule.evaluations() == 0);
      CHECK(rule.packets() == 0);
      CHECK(rule.bytes() == 0);
    }
    // The states stay counted, as pf keeps states_cur and states_tot.
    CHECK(r.rules().rules(1).states_current() == 1);
    CHECK(r.rules().rules(2).states_created() == 1);
    CHECK(d.send(syn("10.0.0.1", 40002, "10.9.0.1", 81)).action == engine::Verdict::Action::Drop);
    r = d.call(make([](Request& q) { q.mutable_rules_show(); }));
    CHECK(r.rules().rules(0).packets() == 1);
    CHECK(r.rules().rules(0).bytes() > 0);
    CHECK(r.rules().rules(1).packets() == 0);
  }

  SECTION("rules zero of an anchor the rules lack is refused, and nothing is zeroed") {
    const Response z = d.call(make([](Request& q) { q.mutable_rules_zero()->set_anchor("nowhere"); }));
    CHECK_FALSE(z.ok());
    CHECK(z.error() == "rules zero: no anchor \"nowhere\" in " + d.config.rules.file);
    const Response r = d.call(make([](Request& q) { q.mutable_rules_show(); }));
    CHECK(r.rules().rules(0).packets() == 1);
  }

  SECTION("rules show lists each rule with @N, its text, location and counters") {
    const Response r = d.call(make([](Request& q) { q.mutable_rules_show(); }));
    REQUIRE(r.ok());
    REQUIRE(r.rules().rules_size() == 3);
    CHECK(r.rules().rules_file() == d.config.rules.file);
    CHECK(r.rules().rules(0).text().rfind("block", 0) == 0);
    CHECK(r.rules().rules(1).text().find("pass") == 0);
    CHECK(r.rules().rules(1).location() == d.config.rules.file + ":2");
    CHECK(r.rules().rules(2).states_created() == 1);
  }

  SECTION("states: list, count and filters") {
    Request q;
    q.mutable_states();
    Response r = d.call(q);
    REQUIRE(r.ok());
    CHECK(r.states().total() == 2);
    CHECK(r.states().matched() == 2);
    REQUIRE(r.states().states_size() == 2);
    bool saw_tcp = false;
    for (const auto& s : r.states().states()) {
      if (s.proto() != 6) continue;
      saw_tcp = true;
      CHECK(s.src().address() == "10.0.0.1");
      CHECK(s.src().port() == 40000);
      CHECK(s.dst().address() == "10.9.0.1");
      CHECK(s.dst().port() == 80);
      CHECK(s.family() == 4);
      CHECK(s.creator() == 3);
      CHECK(s.rule() == 1);
      CHECK(s.src_state() == "SYN_SENT");
      CHECK(s.timeout() == "tcp.first");
      CHECK(s.expires_in_ms() > 0);
      CHECK(s.packets_out() == 1);
      CHECK_FALSE(s.has_wire_src());
    }
    CHECK(saw_tcp);

    q.mutable_states()->mutable_filter()->set_port(53);
    r = d.call(q);
    REQUIRE(r.states().states_size() == 1);
    CHECK(r.states().states(0).src().address() == "2001:db8::1");
    CHECK(r.states().states(0).src_state() == "SINGLE");

    q.mutable_states()->mutable_filter()->Clear();
    q.mutable_states()->mutable_filter()->set_address("10.0.0.0/8");
    r = d.call(q);
    CHECK(r.states().matched() == 1);
    q.mutable_states()->mutable_filter()->set_address("10.9.0.1");
    CHECK(d.call(q).states().matched() == 1);
    q.mutable_states()->mutable_filter()->set_address("192.0.2.0/24");
    CHECK(d.call(q).states().matched() == 0);
    q.mutable_states()->mutable_filter()->set_address("2001:db8::/32");
    CHECK(d.call(q).states().matched() == 1);

    q.mutable_states()->mutable_filter()->Clear();
    q.mutable_states()->mutable_filter()->set_proto(17);
    CHECK(d.call(q).states().matched() == 1);

    q.mutable_states()->mutable_filter()->Clear();
    q.mutable_states()->set_limit(1);
    r = d.call(q);
    CHECK(r.states().states_size() == 1);
    CHECK(r.states().matched() == 2);
    CHECK(r.states().truncated());

    q.mutable_states()->set_count_only(true);
    r = d.call(q);
    CHECK(r.states().matched() == 2);
    CHECK(r.states().states_size() == 0);

    q.mutable_states()->mutable_filter()->set_address("10.0.0.1/8");  // host bits set
    r = d.call(q);
    CHECK_FALSE(r.ok());
    CHECK(r.error() == "states: '10.0.0.1/8' is not an address or prefix (e.g. 10.0.0.1, 10.0.0.0/8)");
  }

  SECTION("a broken reload keeps the running rules and the states") {
    const std::string broken = d.write("broken.conf", "block all\npass proto tcp to port 99999\n");
    Request q;
    q.mutable_rules_load()->set_path(broken);
    const Response r = d.call(q);
    CHECK_FALSE(r.ok());
    CHECK(r.error().rfind(broken + ":2:", 0) == 0);
    CHECK_FALSE(r.has_rules_loaded());
    CHECK(d.engine.rules()->size() == 3);
    CHECK(d.engine.states().size() == 2);
    CHECK(d.service.rules_file() == d.config.rules.file);
    // Same verdicts as before.
    CHECK(d.send(syn("10.0.0.2", 40000, "10.9.0.1", 81)).action == engine::Verdict::Action::Drop);
    const Response st = d.call(make([](Request& x) { x.mutable_status(); }));
    CHECK(st.status().rule_reload_failures() == 1);
    MetricWriter metrics;
    d.service.render_metrics(metrics);
    CHECK(metrics.text().find("pairwall_rule_loads_refused_total 1\n") != std::string::npos);

    q.mutable_rules_load()->set_path((d.dir / "missing.conf").string());
    CHECK_FALSE(d.call(q).ok());
  }

  SECTION("a good reload changes verdicts and keeps the states") {
    const std::string good = d.write("good.conf", "block all\npass proto tcp to port 81\n");
    Request q;
    q.mutable_rules_load()->set_path(good);
    const Response r = d.call(q);
    INFO(r.error());
    REQUIRE(r.ok());
    CHECK(r.rules_loaded().rule_count() == 2);
    CHECK(r.rules_loaded().states_kept() == 2);
    CHECK(r.rules_loaded().path() == good);
    CHECK(d.send(syn("10.0.0.2", 40000, "10.9.0.1", 81)).action == engine::Verdict::Action::Accept);
    CHECK(d.send(syn("10.0.0.2", 40001, "10.9.0.1", 80)).action == engine::Verdict::Action::Drop);
    // The connection opened under the old rules still passes through its state.
    const Bytes reply = PacketBuilder()
                            .ipv4("10.9.0.1", "10.0.0.1")
                            .tcp(80, 40000)
                            .flags(tcpflag::kSyn | tcpflag::kAck)
                            .seq(5000)
                            .ack(1001)
                            .build();
    const auto v = d.send(reply);
    CHECK(v.action == engine::Verdict::Action::Accept);
    CHECK(v.reason == engine::Reason::State);
    // An empty path reloads the current file: now good.conf.
    Request again;
    again.mutable_rules_load();
    CHECK(d.call(again).rules_loaded().path() == good);
  }

  SECTION("the config's state limit overrides the rule file's") {
    d.service.set_state_limit(5);
    REQUIRE(d.service.load_rules("").ok);
    CHECK(d.engine.states().limit() == 5);
  }

  SECTION("states kill removes what the filter names, and refuses an empty or bad filter") {
    auto kill = [&d](const std::string& address, uint32_t port, uint32_t proto) {
      Request q = make([](Request& r) { r.mutable_kill_states(); });
      auto* f = q.mutable_kill_states()->mutable_filter();
      f->set_address(address);
      f->set_port(port);
      f->set_proto(proto);
      return d.call(q);
    };
    Response r = kill("", 0, 0);
    CHECK_FALSE(r.ok());
    CHECK(
        r.error() ==
        "states kill: name an address, prefix, port, protocol, id, label, from, to or on (every state: flush "
        "states)");
    r = kill("10.0.0.0/33", 0, 0);
    CHECK_FALSE(r.ok());
    CHECK(r.error() == "states kill: '10.0.0.0/33' is not an address or prefix (e.g. 10.0.0.1, 10.0.0.0/8)");
    CHECK(kill("", 70000, 0).error() == "states kill: port 70000 is out of range 1..65535");
    CHECK(d.engine.states().size() == 2);

    Request by_id = make([](Request& q) { q.mutable_kill_states(); });
    by_id.mutable_kill_states()->mutable_filter()->set_id("3:x");
    CHECK(d.call(by_id).error() == "states kill: id '3:x' is not CREATOR:COUNTER (e.g. 1:4711)");
    engine::StateId udp_id;
    d.engine.states().for_each([&](const engine::StateEntry& e) {
      if (e.key(0).proto == 17) udp_id = e.id;
    });
    auto* id_filter = by_id.mutable_kill_states()->mutable_filter();
    id_filter->set_id(std::to_string(udp_id.creator) + ":" + std::to_string(udp_id.counter + 1));
    CHECK(d.call(by_id).killed().states() == 0);
    id_filter->set_id(std::to_string(udp_id.creator) + ":" + std::to_string(udp_id.counter));
    id_filter->set_address("10.0.0.0/8");  // the id's state, but not its address: nothing
    CHECK(d.call(by_id).killed().states() == 0);
    id_filter->clear_address();
    CHECK(d.call(by_id).killed().states() == 1);
    CHECK(d.engine.states().size() == 1);
    REQUIRE(
        d.send(PacketBuilder().ipv6("2001:db8::1", "2001:db8::2").udp(5353, 53).payload(10).build()).action ==
        engine::Verdict::Action::Accept);
    REQUIRE(d.engine.states().size() == 2);

    r = kill("10.9.0.0/16", 0, 17);  // the TCP state's server, but UDP only: nothing
    REQUIRE(r.ok());
    CHECK(r.killed().states() == 0);
    r = kill("10.9.0.1", 80, 0);
    REQUIRE(r.ok());
    CHECK(r.killed().states() == 1);
    CHECK(d.engine.states().size() == 1);
    r = kill("2001:db8::/32", 0, 0);
    REQUIRE(r.ok());
    CHECK(r.killed().states() == 1);
    CHECK(d.engine.states().size() == 0);
  }

  SECTION("flush states empties the table") {
    const Response r = d.call(make([](Request& q) { q.mutable_flush_states(); }));
    REQUIRE(r.ok());
    CHECK(r.flushed().states() == 2);
    CHECK(d.engine.states().size() == 0);
  }
}

// pfctl -k label -k NAME: the states whose creating rule carries the label, whatever their
// addresses; a label no rule carries names no state.
TEST_CASE("service: a label filter names the states of the rules with that label", "[service]") {
  Daemon d;
  REQUIRE(d.service
              .load_rules(d.write("labels.conf",
                                  "block all\n"
                                  "pass proto tcp to port 80 label \"web\"\n"
                                  "pass proto tcp to port 22 label \"ssh\"\n"
                                  "pass proto udp label \"web\"\n"))
              .ok);
  REQUIRE(d.send(syn("10.0.0.1", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  REQUIRE(d.send(syn("10.0.0.1", 40001, "10.9.0.1", 22)).action == engine::Verdict::Action::Accept);
  REQUIRE(d.send(PacketBuilder().ipv4("10.0.0.2", "10.9.0.2").udp(5353, 53).payload(10).build()).action ==
          engine::Verdict::Action::Accept);
  REQUIRE(d.engine.states().size() == 3);

  auto with_label = [](Request& q, StateFilter* f, const std::string& label) {
    f->set_label(label);
    return q;
  };
  Request list = make([](Request& q) { q.mutable_states(); });
  Response r = d.call(with_label(list, list.mutable_states()->mutable_filter(), "web"));
  REQUIRE(r.ok());
  CHECK(r.states().matched() == 2);

  Request kill = make([](Request& q) { q.mutable_kill_states(); });
  r = d.call(with_label(kill, kill.mutable_kill_states()->mutable_filter(), "nosuch"));
  REQUIRE(r.ok());
  CHECK(r.killed().states() == 0);
  kill.mutable_kill_states()->mutable_filter()->set_proto(17);
  r = d.call(with_label(kill, kill.mutable_kill_states()->mutable_filter(), "web"));
  REQUIRE(r.ok());
  CHECK(r.killed().states() == 1);  // web's UDP state; its TCP one stays
  kill.mutable_kill_states()->mutable_filter()->clear_proto();
  r = d.call(kill);
  CHECK(r.killed().states() == 1);
  REQUIRE(d.engine.states().size() == 1);
  d.engine.states().for_each(
      [](const engine::StateEntry& e) { CHECK((e.key(0).port[0] == 22 || e.key(0).port[1] == 22)); });
}

// pfctl -k SRC -k DST: from names the side that opened the connection, to the other, where a bare
// address names either.
TEST_CASE("service: from and to name the sides of a connection, a bare address either", "[service]") {
  Daemon d;
  REQUIRE(d.service.load_rules(d.write("all.conf", "pass all\n")).ok);
  REQUIRE(d.send(syn("10.0.0.1", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  REQUIRE(d.send(syn("10.9.0.2", 40001, "10.0.0.1", 22)).action == engine::Verdict::Action::Accept);
  REQUIRE(d.send(syn("10.0.0.3", 40002, "10.9.0.3", 80)).action == engine::Verdict::Action::Accept);

  auto matched = [&d](const std::string& address, const std::string& from, const std::string& to) {
    Request q = make([](Request& r) { r.mutable_states(); });
    auto* f = q.mutable_states()->mutable_filter();
    f->set_address(address);
    f->set_from(from);
    f->set_to(to);
    const Response r = d.call(q);
    INFO(r.error());
    REQUIRE(r.ok());
    return r.states().matched();
  };
  CHECK(matched("10.0.0.1", "", "") == 2);
  CHECK(matched("", "10.0.0.1", "") == 1);
  CHECK(matched("", "", "10.0.0.1") == 1);
  CHECK(matched("", "10.0.0.0/24", "10.9.0.0/16") == 2);
  CHECK(matched("", "10.9.0.0/16", "10.0.0.0/24") == 1);
  CHECK(matched("", "10.9.0.0/16", "10.9.0.0/16") == 0);

  Request kill = make([](Request& q) { q.mutable_kill_states(); });
  kill.mutable_kill_states()->mutable_filter()->set_to("10.0.0.0/33");
  CHECK(d.call(kill).error() ==
        "states kill: to '10.0.0.0/33' is not an address or prefix (e.g. 10.0.0.1, 10.0.0.0/8)");
  kill.mutable_kill_states()->mutable_filter()->set_to("10.9.0.0/16");
  kill.mutable_kill_states()->mutable_filter()->set_from("10.0.0.1");
  const Response r = d.call(kill);
  REQUIRE(r.ok());
  CHECK(r.killed().states() == 1);
  CHECK(matched("10.0.0.1", "", "") == 1);
  CHECK(matched("", "10.0.0.3", "") == 1);
}

// As pfctl -s rules and -s nat: the scrub and translation rules are listed too, each list with its
// own @N and the line it came from.
TEST_CASE("service: rules show lists the scrub and translation rules with the filter rules", "[service]") {
  Daemon d;
  const std::string path = d.write("scrubbed.conf",
                                   "scrub in all fragment reassemble\n"
                                   "scrub out on wan0 all max-mss 1400\n"
                                   "nat on wan0 from 10.0.0.0/8 to any -> 192.0.2.1\n"
                                   "pass all\n");
  REQUIRE(d.service.load_rules(path).ok);
  const Response r = d.call(make([](Request& q) { q.mutable_rules_show(); }));
  REQUIRE(r.ok());
  REQUIRE(r.rules().scrubs_size() == 2);
  CHECK(r.rules().scrubs(0).number() == 0);
  CHECK(r.rules().scrubs(0).text() == "scrub in all fragment reassemble");
  CHECK(r.rules().scrubs(1).number() == 1);
  CHECK(r.rules().scrubs(1).text() == "scrub out on wan0 all max-mss 1400");
  CHECK(r.rules().scrubs(1).location() == path + ":2");
  REQUIRE(r.rules().translations_size() == 1);
  CHECK(r.rules().rules_size() == 1);
  CHECK(r.rules().scrubs(0).packets() == 0);

  // A scrub rule's counters: the packets it matched first (on the in pass here), and their bytes.
  const Bytes packet = syn("10.0.0.2", 40000, "10.9.0.1", 22);
  REQUIRE(d.send(packet).reason == engine::Reason::Match);
  REQUIRE(d.send(packet).reason == engine::Reason::State);
  const Response counted = d.call(make([](Request& q) { q.mutable_rules_show(); }));
  REQUIRE(counted.rules().scrubs_size() == 2);
  CHECK(counted.rules().scrubs(0).evaluations() == 2);
  CHECK(counted.rules().scrubs(0).packets() == 2);
  CHECK(counted.rules().scrubs(0).bytes() == 2 * packet.size());
  CHECK(counted.rules().scrubs(1).packets() == 0);
}

// An ICMP query's state keeps its identifier and type where a TCP or UDP state keeps its ports:
// `port N` names TCP and UDP ports, not an echo of identifier N nor every echo request (type 8).
TEST_CASE("service: a port filter matches TCP and UDP states, not ICMP queries", "[service]") {
  Daemon d;
  REQUIRE(d.service.load_rules(d.write("all.conf", "pass all\n")).ok);
  REQUIRE(d.send(PacketBuilder().ipv4("10.0.0.1", "10.9.0.1").icmp_echo(22, 1).build()).reason ==
          engine::Reason::Match);
  REQUIRE(d.send(syn("10.0.0.2", 40000, "10.9.0.1", 22)).reason == engine::Reason::Match);
  REQUIRE(d.engine.states().size() == 2);
  auto filtered = [](uint32_t port) {
    Request q = make([](Request& r) { r.mutable_states(); });
    q.mutable_states()->mutable_filter()->set_port(port);
    return q;
  };
  Response r = d.call(filtered(22));
  REQUIRE(r.states().states_size() == 1);
  CHECK(r.states().states(0).proto() == 6);
  CHECK(d.call(filtered(8)).states().matched() == 0);

  Request kill = make([](Request& q) { q.mutable_kill_states(); });
  kill.mutable_kill_states()->mutable_filter()->set_port(22);
  CHECK(d.call(kill).killed().states() == 1);
  kill.mutable_kill_states()->mutable_filter()->set_port(8);
  CHECK(d.call(kill).killed().states() == 0);
  CHECK(d.engine.states().size() == 1);
}

TEST_CASE("service: tables list, show and change the running rules' tables, as pfctl -T", "[service]") {
  Daemon d;
  const std::string path = d.write("tables.conf",
                                   "table <blocked> persist {}\n"
                                   "table <fixed> const { 192.0.2.0/24 }\n"
                                   "block all\n"
                                   "pass proto tcp to port 80\n"
                                   "block quick from <blocked>\n");
  REQUIRE(d.service.load_rules(path).ok);
  auto edit = [&d](const std::string& name, TableEdit::Op op, std::vector<std::string> addresses) {
    Request q = make([](Request& r) { r.mutable_table_edit(); });
    auto* e = q.mutable_table_edit();
    e->set_name(name);
    e->set_op(op);
    for (const auto& a : addresses) e->add_addresses(a);
    return d.call(q);
  };
  auto entries = [](const Response& r) {
    REQUIRE(r.tables().tables_size() == 1);
    const auto& e = r.tables().tables(0).entries();
    return std::vector<std::string>(e.begin(), e.end());
  };
  CHECK(d.send(syn("10.0.0.1", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);

  Response r = d.call(make([](Request& q) { q.mutable_tables(); }));
  REQUIRE(r.ok());
  REQUIRE(r.tables().tables_size() == 2);
  CHECK(r.tables().entry_limit() == 200000);
  CHECK(r.tables().tables(0).name() == "blocked");
  CHECK(r.tables().tables(0).count() == 0);
  CHECK(r.tables().tables(1).count() == 1);
  CHECK(r.tables().tables(1).is_const());
  CHECK(r.tables().tables(1).entries_size() == 0);

  r = edit("blocked", TableEdit::ADD, {"10.0.0.0/24", "!10.0.0.7", "10.0.0.0/24"});
  REQUIRE(r.ok());
  CHECK(r.tables().added() == 2);
  CHECK(entries(r) == std::vector<std::string>{"10.0.0.0/24", "!10.0.0.7/32"});
  // New connections from the table are blocked at once, its exception passes, and the rules'
  // counters carried over the recompile.
  CHECK(d.send(syn("10.0.0.1", 40001, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  CHECK(d.send(syn("10.0.0.7", 40001, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  const Response shown = d.call(make([](Request& q) { q.mutable_rules_show(); }));
  REQUIRE(shown.rules().rules_size() == 3);
  CHECK(shown.rules().rules(1).packets() == 2);

  // pfctl -T test: the addresses the table holds, its exceptions and what lies outside it not.
  auto test = [&d](const std::string& name, std::vector<std::string> addresses) {
    Request q = make([](Request& req) { req.mutable_tables(); });
    q.mutable_tables()->set_name(name);
    for (const auto& a : addresses) q.mutable_tables()->add_test(a);
    return d.call(q);
  };
  r = test("blocked", {"10.0.0.1", "10.0.0.7", "10.1.0.1", "10.0.0.255"});
  REQUIRE(r.ok());
  CHECK(r.tables().tested() == 4);
  CHECK(std::vector<std::string>(r.tables().matched().begin(), r.tables().matched().end()) ==
        std::vector<std::string>{"10.0.0.1", "10.0.0.255"});
  CHECK(test("fixed", {"192.0.2.9", "2001:db8::1"}).tables().matched_size() == 1);
  CHECK(test("blocked", {"10.0.0.0/24"}).error() ==
        "tables: '10.0.0.0/24' is not an address (e.g. 192.0.2.1, 2001:db8::1)");
  // A host written as a prefix is an address, as pfr_tst_addrs refuses networks alone.
  r = test("blocked", {"10.0.0.1/32", "10.0.0.7/32", "::ffff:10.0.0.1/128"});
  REQUIRE(r.ok());
  CHECK(std::vector<std::string>(r.tables().matched().begin(), r.tables().matched().end()) ==
        std::vector<std::string>{"10.0.0.1/32"});
  CHECK(test("nope", {"10.0.0.1"}).error() == "tables: no table <nope> in " + path);

  CHECK(edit("blocked", TableEdit::ADD, {"10.0.0.0/24"}).tables().added() == 0);
  // As pfctl -T add: a prefix the table holds is not added negated the other way (a conflict), nor
  // twice from one list; a delete takes the entry as the table holds it.
  r = edit("blocked", TableEdit::ADD, {"!10.0.0.0/24", "10.0.0.7", "10.0.0.9", "!10.0.0.9"});
  CHECK(r.tables().added() == 1);
  CHECK(entries(r) == std::vector<std::string>{"10.0.0.0/24", "10.0.0.9/32", "!10.0.0.7/32"});
  CHECK(d.send(syn("10.0.0.1", 40001, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  CHECK(edit("blocked", TableEdit::DELETE, {"!10.0.0.9", "10.0.0.9"}).tables().deleted() == 1);
  r = edit("blocked", TableEdit::DELETE, {"10.0.0.0/24", "10.5.0.0/16"});
  REQUIRE(r.ok());
  CHECK(r.tables().deleted() == 1);
  CHECK(entries(r) == std::vector<std::string>{"!10.0.0.7/32"});
  CHECK(d.send(syn("10.0.0.1", 40002, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);

  CHECK(edit("fixed", TableEdit::ADD, {"10.0.0.1"}).error() ==
        "tables: <fixed> is const: change it in " + path);
  CHECK(edit("nope", TableEdit::FLUSH, {}).error() == "tables: no table <nope> in " + path);
  // A prefix with host bits set offers its network, as the rule file's lists do; nothing is added.
  CHECK(edit("blocked", TableEdit::ADD, {"10.0.0.2", "10.0.0.1/8"}).error() ==
        "tables: host bits set in '10.0.0.1/8': did you mean 10.0.0.0/8?");
  CHECK(edit("blocked", TableEdit::ADD, {"!10.0.0.1/8"}).error() ==
        "tables: host bits set in '!10.0.0.1/8': did you mean !10.0.0.0/8?");
  CHECK(edit("blocked", TableEdit::ADD, {"blocked.example.com"}).error() ==
        "tables: 'blocked.example.com' is not an address or prefix (e.g. 10.0.0.1, !10.0.0.0/8)");
  // An empty list (a feed's file with no entries today) changes nothing and is no error, as pfctl
  // -T add -f answers "0/0 addresses added."
  for (const auto op : {TableEdit::ADD, TableEdit::DELETE}) {
    r = edit("blocked", op, {});
    REQUIRE(r.ok());
    CHECK(r.tables().added() == 0);
    CHECK(r.tables().deleted() == 0);
    CHECK(entries(r) == std::vector<std::string>{"!10.0.0.7/32"});
  }

  r = d.call(make([](Request& q) { q.mutable_tables()->set_name("blocked"); }));
  CHECK(entries(r) == std::vector<std::string>{"!10.0.0.7/32"});
  MetricWriter metrics;
  d.service.render_metrics(metrics);
  CHECK(metrics.text() ==
        "# HELP pairwall_table_entries Entries in each table of the running rules, exceptions included.\n"
        "# TYPE pairwall_table_entries gauge\n"
        "pairwall_table_entries{table=\"blocked\"} 1\n"
        "pairwall_table_entries{table=\"fixed\"} 1\n"
        "# HELP pairwall_table_entry_limit Entries all tables may hold together (set limit table-entries).\n"
        "# TYPE pairwall_table_entry_limit gauge\n"
        "pairwall_table_entry_limit 200000\n"
        "# HELP pairwall_source_overloads_refused_total Sources an overload could not add to its table: the "
        "rules with them added were refused (set limit table-entries).\n"
        "# TYPE pairwall_source_overloads_refused_total counter\n"
        "pairwall_source_overloads_refused_total 0\n"
        "# HELP pairwall_shared_tables_refused_total Versions of a shared table the peer sent that this node "
        "did not take: not in its [sync] tables, absent from its rules, const, or over set limit "
        "table-entries.\n"
        "# TYPE pairwall_shared_tables_refused_total counter\n"
        "pairwall_shared_tables_refused_total 0\n"
        "# HELP pairwall_rule_loads_refused_total Rule file loads (SIGHUP, rules load) refused; the running "
        "rules stayed.\n"
        "# TYPE pairwall_rule_loads_refused_total counter\n"
        "pairwall_rule_loads_refused_total 0\n");
  r = edit("blocked", TableEdit::FLUSH, {});
  CHECK(r.tables().deleted() == 1);
  CHECK(r.tables().tables(0).count() == 0);

  // Replace leaves exactly the list given and counts what changed, as a feed's refresh needs.
  REQUIRE(edit("blocked", TableEdit::ADD, {"10.0.0.0/24", "10.1.0.0/16", "!10.0.0.7"}).tables().added() == 3);
  r = edit("blocked", TableEdit::REPLACE,
           {"10.1.0.0/16", "10.0.0.1", "10.0.0.1", "2001:db8::/32", "!10.0.0.1", "!10.1.0.0/16"});
  REQUIRE(r.ok());
  CHECK(r.tables().added() == 2);
  CHECK(r.tables().deleted() == 2);
  CHECK(entries(r) == std::vector<std::string>{"10.1.0.0/16", "10.0.0.1/32", "2001:db8::/32"});
  CHECK(d.send(syn("10.0.0.1", 40004, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  CHECK(d.send(syn("10.0.0.2", 40004, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  CHECK(r.tables().changed() == 0);
  // An entry kept with its `!` flipped is changed, as pfctl -T replace counts it, not added and
  // deleted; and a replace that only flips one is still taken.
  r = edit("blocked", TableEdit::REPLACE, {"10.1.0.0/16", "!10.0.0.1", "2001:db8::/32"});
  REQUIRE(r.ok());
  CHECK(r.tables().added() == 0);
  CHECK(r.tables().deleted() == 0);
  CHECK(r.tables().changed() == 1);
  CHECK(d.send(syn("10.0.0.1", 40005, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  r = edit("blocked", TableEdit::REPLACE, {"10.1.0.0/16", "10.0.0.1", "192.0.2.0/24"});
  CHECK(r.tables().added() == 1);
  CHECK(r.tables().deleted() == 1);
  CHECK(r.tables().changed() == 1);
  CHECK(d.send(syn("10.0.0.1", 40006, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  r = edit("blocked", TableEdit::REPLACE, {});
  CHECK(r.tables().deleted() == 3);
  CHECK(r.tables().tables(0).count() == 0);
  CHECK(edit("blocked", TableEdit::FLUSH, {"10.0.0.1"}).error() == "tables: flush takes no addresses");
  CHECK(edit("fixed", TableEdit::REPLACE, {}).error() == "tables: <fixed> is const: change it in " + path);
  // An operation this daemon does not know (from a newer pairwallctl, before the daemon's restart)
  // is refused, not taken for a delete of the addresses it names.
  REQUIRE(edit("blocked", TableEdit::ADD, {"10.0.0.1"}).tables().added() == 1);
  CHECK(edit("blocked", static_cast<TableEdit::Op>(9), {"10.0.0.1"}).error() ==
        "tables: unknown operation 9 (is pairwallctl newer than pairwalld?)");
  CHECK(edit("blocked", TableEdit::FLUSH, {}).tables().deleted() == 1);

  // A feed's worth of entries: added, then deleted, each once.
  std::vector<std::string> feed;
  for (int i = 0; i < 20000; ++i)
    feed.push_back("10." + std::to_string(i / 256 + 100) + "." + std::to_string(i % 256) + ".1");
  CHECK(edit("blocked", TableEdit::ADD, feed).tables().added() == 20000);
  feed.resize(15000);
  r = edit("blocked", TableEdit::DELETE, feed);
  CHECK(r.tables().deleted() == 15000);
  CHECK(r.tables().tables(0).count() == 5000);
  CHECK(d.send(syn("10.178.31.1", 40005, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  CHECK(d.send(syn("10.100.0.1", 40005, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  REQUIRE(edit("blocked", TableEdit::FLUSH, {}).tables().deleted() == 5000);

  // A reload sets the tables back to the file's contents, as pfctl -f does.
  REQUIRE(edit("blocked", TableEdit::ADD, {"10.0.0.0/24"}).tables().added() == 1);
  REQUIRE(d.service.load_rules("").ok);
  r = d.call(make([](Request& q) { q.mutable_tables()->set_name("blocked"); }));
  CHECK(r.tables().tables(0).count() == 0);
  CHECK(d.send(syn("10.0.0.1", 40003, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
}

TEST_CASE("service: a reload keeps the entries of tables the file lists none for, as pfctl -f", "[service]") {
  Daemon d;
  auto rules = [&d](const std::string& extra) {
    return d.write("keep.conf",
                   "table <kept> persist\n"
                   "table <listed> persist {}\n" +
                       extra +
                       "block all\n"
                       "pass proto tcp to port 80\n"
                       "block quick from { <kept> <listed> }\n");
  };
  const std::string path = rules("");
  REQUIRE(d.service.load_rules(path).ok);
  for (const char* name : {"kept", "listed"}) {
    Request q = make([](Request& r) { r.mutable_table_edit(); });
    q.mutable_table_edit()->set_name(name);
    q.mutable_table_edit()->add_addresses(std::string(name) == "kept" ? "10.0.0.1" : "10.0.0.2");
    REQUIRE(d.call(q).ok());
  }
  auto count = [&d](const std::string& name) {
    Request q = make([](Request& r) { r.mutable_tables(); });
    q.mutable_tables()->set_name(name);
    Response r = d.call(q);
    REQUIRE(r.ok());
    return r.tables().tables(0).count();
  };
  REQUIRE(d.service.load_rules("").ok);
  CHECK(count("kept") == 1);
  CHECK(count("listed") == 0);
  CHECK(d.send(syn("10.0.0.1", 40000, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  CHECK(d.send(syn("10.0.0.2", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);

  // Made const without a list, it keeps them, now unchangeable; a file that lists entries for it
  // sets it to the file's.
  rules("table <other> { 192.0.2.1 }\n");
  REQUIRE(d.service.load_rules("").ok);
  CHECK(count("kept") == 1);
  d.write("keep.conf", "table <kept> const\nblock quick from <kept>\n");
  REQUIRE(d.service.load_rules("").ok);
  CHECK(count("kept") == 1);
  CHECK(d.send(syn("10.0.0.1", 40001, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  d.write("keep.conf", "table <kept> persist { 10.0.0.9 }\nblock quick from <kept>\n");
  REQUIRE(d.service.load_rules("").ok);
  Response r = d.call(make([](Request& q) { q.mutable_tables()->set_name("kept"); }));
  REQUIRE(r.tables().tables(0).entries_size() == 1);
  CHECK(r.tables().tables(0).entries(0) == "10.0.0.9/32");
}

TEST_CASE("service: tables expire removes the entries that came long enough ago, as pfctl -T expire",
          "[service]") {
  Daemon d;
  const std::string path = d.write("expire.conf",
                                   "table <guard> persist\n"
                                   "table <listed> { 192.0.2.1 }\n"
                                   "block quick from { <guard> <listed> }\n");
  REQUIRE(d.service.load_rules(path).ok);
  auto edit = [&d](const std::string& name, TableEdit::Op op, std::vector<std::string> addresses,
                   uint32_t seconds = 0) {
    Request q = make([](Request& r) { r.mutable_table_edit(); });
    auto* e = q.mutable_table_edit();
    e->set_name(name);
    e->set_op(op);
    e->set_seconds(seconds);
    for (const auto& a : addresses) e->add_addresses(a);
    return d.call(q);
  };
  auto entries = [](const Response& r) {
    REQUIRE(r.ok());
    const auto& e = r.tables().tables(0).entries();
    return std::vector<std::string>(e.begin(), e.end());
  };
  REQUIRE(edit("guard", TableEdit::ADD, {"10.0.0.1"}).ok());
  d.now += Millis{60'000};
  REQUIRE(edit("guard", TableEdit::ADD, {"10.0.0.2", "10.0.0.1"}).tables().added() == 1);
  d.now += Millis{30'000};
  // A reload keeps the table and when its entries came.
  REQUIRE(d.service.load_rules("").ok);
  d.now += Millis{10'000};

  Response r = edit("guard", TableEdit::EXPIRE, {}, 41);
  CHECK(r.tables().deleted() == 1);
  CHECK(entries(r) == std::vector<std::string>{"10.0.0.2/32"});
  CHECK(edit("guard", TableEdit::EXPIRE, {}, 41).tables().deleted() == 0);
  r = edit("guard", TableEdit::EXPIRE, {}, 40);
  CHECK(r.tables().deleted() == 1);
  CHECK(r.tables().tables(0).count() == 0);
  // The file's own entries came when the rules were first loaded with them: the reload that
  // listed the same entry again kept its time.
  CHECK(edit("listed", TableEdit::EXPIRE, {}, 101).tables().deleted() == 0);
  CHECK(edit("listed", TableEdit::EXPIRE, {}, 100).tables().deleted() == 1);
  CHECK(edit("guard", TableEdit::EXPIRE, {"10.0.0.1"}, 1).error() == "tables: expire takes no addresses");
}

TEST_CASE("service: tables show -v gives each entry's counters, and tables zero clears them as pfctl -T zero",
          "[service]") {
  Daemon d;
  const std::string path = d.write("counted.conf",
                                   "table <bad> counters { 10.0.0.0/8, !10.0.0.9 }\n"
                                   "table <plain> const { 192.0.2.0/24 }\n"
                                   "block in from <bad>\n"
                                   "block in from ! <bad> to 10.9.0.2\n"
                                   "block in from <plain>\n");
  REQUIRE(d.service.load_rules(path).ok);
  const Bytes probe = syn("10.0.0.1", 40000, "10.9.0.1", 80);
  REQUIRE(d.send(probe).reason == engine::Reason::RuleBlock);
  REQUIRE(d.send(probe).reason == engine::Reason::RuleBlock);
  REQUIRE(d.send(syn("10.0.0.9", 40000, "10.9.0.1", 80)).reason != engine::Reason::RuleBlock);
  REQUIRE(d.send(syn("10.0.0.9", 40000, "10.9.0.2", 80)).reason == engine::Reason::RuleBlock);
  REQUIRE(d.send(syn("192.0.2.1", 40000, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  d.now += Millis{30'000};
  const auto show = [&d](const std::string& name, bool verbose) {
    Request q = make([](Request& r) { r.mutable_tables(); });
    q.mutable_tables()->set_name(name);
    q.mutable_tables()->set_verbose(verbose);
    const Response r = d.call(q);
    REQUIRE(r.ok());
    return r.tables().tables(0);
  };
  TableInfo bad = show("bad", true);
  CHECK(bad.counters());
  REQUIRE(bad.entry_stats_size() == 2);
  REQUIRE(bad.entries(0) == "10.0.0.0/8");
  CHECK(bad.entry_stats(0).in_block_packets() == 2);
  CHECK(bad.entry_stats(0).in_block_bytes() == 2 * probe.size());
  CHECK(bad.entry_stats(0).in_pass_packets() == 0);
  CHECK(bad.entry_stats(0).out_block_packets() == 0);
  CHECK(bad.entry_stats(0).cleared_seconds_ago() == 30);
  REQUIRE(bad.entries(1) == "!10.0.0.9/32");
  // 10.0.0.9 is not in <bad>: `from <bad>` passed it over, `from ! <bad>` blocked it, and the
  // entry that holds it, the exception, counts what that rule did, as pf's does.
  CHECK(bad.entry_stats(1).in_block_packets() == 1);
  CHECK(show("bad", false).entry_stats_size() == 0);
  TableInfo plain = show("plain", true);
  CHECK_FALSE(plain.counters());
  REQUIRE(plain.entry_stats_size() == 1);
  CHECK(plain.entry_stats(0).in_block_packets() == 0);
  CHECK(plain.entry_stats(0).cleared_seconds_ago() == 30);

  const auto zero = [&d](const std::string& name, std::vector<std::string> addresses) {
    Request q = make([](Request& r) { r.mutable_table_edit(); });
    q.mutable_table_edit()->set_name(name);
    q.mutable_table_edit()->set_op(TableEdit::ZERO);
    for (const auto& a : addresses) q.mutable_table_edit()->add_addresses(a);
    return d.call(q);
  };
  // Only the entries named that it holds.
  Response r = zero("bad", {"!10.0.0.9", "10.1.0.0/16"});
  REQUIRE(r.ok());
  CHECK(r.tables().zeroed() == 1);
  bad = show("bad", true);
  CHECK(bad.entry_stats(0).in_block_packets() == 2);
  CHECK(bad.entry_stats(0).cleared_seconds_ago() == 30);
  CHECK(bad.entry_stats(1).cleared_seconds_ago() == 0);
  d.now += Millis{5'000};
  r = zero("bad", {});
  CHECK(r.tables().zeroed() == 2);
  bad = show("bad", true);
  CHECK(bad.entry_stats(0).in_block_packets() == 0);
  CHECK(bad.entry_stats(0).in_block_bytes() == 0);
  CHECK(bad.entry_stats(0).cleared_seconds_ago() == 0);
  // Counting goes on after a zero; a const table's entries are zeroed too (their time alone).
  REQUIRE(d.send(probe).reason == engine::Reason::RuleBlock);
  CHECK(show("bad", true).entry_stats(0).in_block_packets() == 1);
  CHECK(zero("plain", {}).tables().zeroed() == 1);
  CHECK(zero("bad", {"10.0.0.1/8"}).error().starts_with("tables: '10.0.0.1/8' is not an address or prefix"));
  CHECK(zero("none", {}).error().starts_with("tables: no table <none>"));

  // What expire reads: a zeroed entry counts as come when it was zeroed.
  d.now += Millis{10'000};
  Request expire = make([](Request& q) { q.mutable_table_edit(); });
  expire.mutable_table_edit()->set_name("bad");
  expire.mutable_table_edit()->set_op(TableEdit::EXPIRE);
  expire.mutable_table_edit()->set_seconds(11);
  CHECK(d.call(expire).tables().deleted() == 0);
  expire.mutable_table_edit()->set_seconds(10);
  CHECK(d.call(expire).tables().deleted() == 2);
}

TEST_CASE("service: tables add past 'set limit table-entries' is refused and the table stays", "[service]") {
  Daemon d;
  const std::string path = d.write("limited.conf",
                                   "set limit table-entries 3\n"
                                   "table <blocked> persist { 10.0.0.1 }\n"
                                   "table <other> { 10.1.0.1 }\n"
                                   "block quick from <blocked>\n"
                                   "pass all\n");
  REQUIRE(d.service.load_rules(path).ok);
  auto add = [&d](std::vector<std::string> addresses) {
    Request q = make([](Request& r) { r.mutable_table_edit(); });
    auto* e = q.mutable_table_edit();
    e->set_name("blocked");
    e->set_op(TableEdit::ADD);
    for (const auto& a : addresses) e->add_addresses(a);
    return d.call(q);
  };
  Response r = add({"10.0.0.2", "10.0.0.3"});
  CHECK_FALSE(r.ok());
  CHECK(r.error().find(
            "limited.conf:2:7: the tables hold 4 entries, over the limit of 3, <blocked> 3 of them") !=
        std::string::npos);
  CHECK(d.send(syn("10.0.0.2", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  r = d.call(make([](Request& q) { q.mutable_tables()->set_name("blocked"); }));
  REQUIRE(r.tables().tables_size() == 1);
  CHECK(r.tables().tables(0).count() == 1);
  CHECK(d.call(make([](Request& q) { q.mutable_tables(); })).tables().entry_limit() == 3);

  REQUIRE(add({"10.0.0.2"}).ok());
  CHECK(d.send(syn("10.0.0.2", 40001, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);

  // An overload past the limit is refused alike, and counted.
  engine::SourceOverload o;
  std::snprintf(o.table.data(), o.table.size(), "blocked");
  o.address = engine::IpAddress::v4(0x0a000009);
  const auto refused = d.service.apply_overloads(std::span(&o, 1));
  CHECK(refused.added.empty());
  CHECK(refused.refused == 1);
  CHECK(refused.error.find("over the limit of 3") != std::string::npos);
  MetricWriter metrics;
  d.service.render_metrics(metrics);
  CHECK(metrics.text().find("pairwall_source_overloads_refused_total 1\n") != std::string::npos);
  CHECK(d.send(syn("10.0.0.9", 40002, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
}

// pf_src_connlimit adds each offender with its own pfr_insert_kentry(), which fails only once the
// table-entries pool is at its limit: the sources of one batch that fit are added.
TEST_CASE("service: overloads add the sources that fit under 'set limit table-entries'",
          "[service][source]") {
  Daemon d;
  REQUIRE(d.service
              .load_rules(d.write("limited.conf",
                                  "set limit table-entries 4\n"
                                  "table <blocked> persist { 10.0.0.1 }\n"
                                  "table <other> { 10.1.0.1 }\n"
                                  "block quick from <blocked>\n"
                                  "pass all\n"))
              .ok);
  std::vector<engine::SourceOverload> overloads(3);
  for (std::size_t i = 0; i < overloads.size(); ++i) {
    std::snprintf(overloads[i].table.data(), overloads[i].table.size(), "blocked");
    overloads[i].address = engine::IpAddress::v4(0x0a000009 + static_cast<uint32_t>(i));
  }
  const auto r = d.service.apply_overloads(overloads);
  CHECK(r.added ==
        std::vector<std::string>{"10.0.0.9 to <blocked> (rule @0)", "10.0.0.10 to <blocked> (rule @0)"});
  CHECK(r.refused == 1);
  CHECK(r.error ==
        "overload: the tables would hold 5 entries, over the limit of 4 (raise it with 'set limit "
        "table-entries N')");
  CHECK(d.send(syn("10.0.0.9", 40000, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  CHECK(d.send(syn("10.0.0.10", 40000, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  CHECK(d.send(syn("10.0.0.11", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  MetricWriter metrics;
  d.service.render_metrics(metrics);
  CHECK(metrics.text().find("pairwall_source_overloads_refused_total 1\n") != std::string::npos);
}

// pf_src_connlimit adds an offender with pfr_insert_kentry, which leaves a prefix the table holds
// either way: an exception (`!10.0.0.5`, a monitoring host) is not joined by its opposite.
TEST_CASE("service: overload leaves a source the table holds as an exception", "[service][source]") {
  Daemon d;
  REQUIRE(d.service
              .load_rules(d.write("exempt.conf",
                                  "table <abusers> persist { 10.0.0.0/8 !10.0.0.5 }\n"
                                  "block quick from <abusers>\n"
                                  "pass all\n"))
              .ok);
  engine::SourceOverload o;
  std::snprintf(o.table.data(), o.table.size(), "abusers");
  o.address = engine::IpAddress::v4(0x0a000005);
  const auto r = d.service.apply_overloads(std::span(&o, 1));
  CHECK(r.error.empty());
  CHECK(r.added.empty());
  const Response shown = d.call(make([](Request& q) { q.mutable_tables()->set_name("abusers"); }));
  REQUIRE(shown.tables().tables_size() == 1);
  const auto& e = shown.tables().tables(0).entries();
  CHECK(std::vector<std::string>(e.begin(), e.end()) ==
        std::vector<std::string>{"10.0.0.0/8", "!10.0.0.5/32"});
  CHECK(d.send(syn("10.0.0.5", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
}

TEST_CASE("service: overload adds a source to its table and flushes its states", "[service][source]") {
  const char* kRules =
      "table <abusers> persist {}\n"
      "block all\n"
      "pass proto tcp to port 22 keep state (max-src-conn 1, overload <abusers> %s)\n"
      "pass proto tcp to port 80 keep state\n"
      "block quick from <abusers>\n";
  struct Case {
    const char* flush;
    std::size_t killed;  // the port 80 state, the first SSH connection's
  };
  for (const Case c : {Case{"flush global", 2}, Case{"flush", 1}, Case{"", 0}}) {
    DYNAMIC_SECTION("overload <abusers> " << c.flush) {
      Daemon d;
      char text[512];
      std::snprintf(text, sizeof text, kRules, c.flush);
      REQUIRE(d.service.load_rules(d.write("overload.conf", text)).ok);
      auto handshake = [&d](uint16_t port) {
        auto from_client = [&] { return PacketBuilder().ipv4("10.0.0.1", "10.9.0.1").tcp(port, 22); };
        REQUIRE(d.send(from_client().flags(tcpflag::kSyn).seq(1000).build()).reason == engine::Reason::Match);
        REQUIRE(d.send(PacketBuilder()
                           .ipv4("10.9.0.1", "10.0.0.1")
                           .tcp(22, port)
                           .flags(tcpflag::kSyn | tcpflag::kAck)
                           .seq(9000)
                           .ack(1001)
                           .build())
                    .reason == engine::Reason::State);
        return d.send(from_client().flags(tcpflag::kAck).seq(1001).ack(9001).build()).reason;
      };
      REQUIRE(d.send(syn("10.0.0.1", 50000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
      REQUIRE(handshake(40000) == engine::Reason::State);
      CHECK(handshake(40001) == engine::Reason::SourceLimit);

      // pfctl -s Sources: the client under the SSH rule, its one admitted connection counted.
      const Response listed = d.call(make([](Request& q) { q.mutable_sources(); }));
      REQUIRE(listed.sources().sources_size() == 1);
      CHECK(listed.sources().total() == 1);
      CHECK(listed.sources().limit() == 10'000);
      const auto& node = listed.sources().sources(0);
      CHECK(node.address() == "10.0.0.1");
      CHECK(node.rule() == 1);
      CHECK_FALSE(node.global());
      CHECK(node.connections() == 1);  // the refused one went with its state
      CHECK(node.states() == 1);

      std::vector<engine::SourceOverload> overloads;
      engine::SourceOverload o;
      while (d.data_plane.worker.overloads().pop(o)) overloads.push_back(o);
      REQUIRE(overloads.size() == 1);
      CHECK(std::string(overloads[0].table.data()) == "abusers");
      CHECK(overloads[0].rule == 1);
      const auto r = d.service.apply_overloads(overloads);
      CHECK(r.error.empty());
      CHECK(r.added == std::vector<std::string>{"10.0.0.1 to <abusers> (rule @1)"});
      CHECK(r.states_killed == c.killed);
      CHECK(d.engine.states().size() == 2 - c.killed);
      // The table now blocks the source's new connections; others still come in.
      CHECK(d.send(syn("10.0.0.1", 40002, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
      CHECK(d.send(syn("10.0.0.2", 40002, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
      // Applied twice (a second worker saw it too), the address is not added again.
      CHECK(d.service.apply_overloads(overloads).added.empty());
      const Response shown = d.call(make([](Request& q) { q.mutable_tables()->set_name("abusers"); }));
      REQUIRE(shown.tables().tables_size() == 1);
      CHECK(shown.tables().tables(0).count() == 1);

      // The offender came when the overload added it: `tables expire` lets it in again later.
      d.now += Millis{3'600'000};
      Request expire = make([](Request& q) { q.mutable_table_edit(); });
      expire.mutable_table_edit()->set_name("abusers");
      expire.mutable_table_edit()->set_op(TableEdit::EXPIRE);
      expire.mutable_table_edit()->set_seconds(3601);
      CHECK(d.call(expire).tables().deleted() == 0);
      expire.mutable_table_edit()->set_seconds(3600);
      CHECK(d.call(expire).tables().deleted() == 1);
      CHECK(d.send(syn("10.0.0.1", 40003, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
    }
  }
}

// The Reload request runs what the daemon set (SIGHUP's reload) and answers with its outcome, as
// `rules load` does, so that `pairwalld --reload` (ExecReload) can wait for it and fail with it.
TEST_CASE("service: Reload answers with the outcome of the daemon's reload", "[service]") {
  Daemon d;
  const Request reload = make([](Request& q) { q.mutable_reload(); });
  Response r = d.call(reload);
  CHECK_FALSE(r.ok());
  CHECK(r.error() == "this daemon cannot reload its config");

  int reloads = 0;
  ControlService::LoadResult outcome{false, "pf.conf:2:5: expected an address, got '!'", 0, {}};
  d.service.set_reload([&] {
    ++reloads;
    return outcome.ok ? d.service.load_rules("") : outcome;
  });
  r = d.call(reload);
  CHECK(reloads == 1);
  CHECK_FALSE(r.ok());
  CHECK(r.error() == "pf.conf:2:5: expected an address, got '!'");
  CHECK_FALSE(r.has_rules_loaded());

  outcome.ok = true;
  r = d.call(reload);
  CHECK(reloads == 2);
  REQUIRE(r.ok());
  CHECK(r.rules_loaded().path() == d.config.rules.file);
  CHECK(r.rules_loaded().rule_count() == 3);
}

TEST_CASE("service: health, versions, sync and failover routing", "[service]") {
  Daemon d;
  const Request health = make([](Request& q) { q.mutable_health(); });

  Response r = d.call(health);
  REQUIRE(r.ok());
  CHECK_FALSE(r.health().healthy());
  CHECK(r.health().reason() == "no rule set loaded");

  REQUIRE(d.service.load_rules("").ok);
  CHECK(d.call(health).health().healthy());

  std::optional<std::string> stuck;
  d.service.set_health_probe([&] { return stuck; });
  stuck = "queue 0 worker made no progress for 12 s";
  r = d.call(health);
  CHECK_FALSE(r.health().healthy());
  CHECK(r.health().reason() == "queue 0 worker made no progress for 12 s");
  stuck.reset();

  // No failover configured.
  r = d.call(make([](Request& q) { q.mutable_failover_status(); }));
  CHECK(r.ok());
  CHECK_FALSE(r.failover_status().enabled());
  r = d.call(make([](Request& q) { q.mutable_failover_demote()->set_amount(1); }));
  CHECK_FALSE(r.ok());
  CHECK(r.error() == "failover is not configured (no [failover] section in " + d.config.file + ")");
  r = d.call(make([](Request& q) { q.mutable_sync_status(); }));
  CHECK(r.ok());
  CHECK_FALSE(r.sync_status().enabled());
  const Request resync = make([](Request& q) { q.mutable_sync_resync(); });
  r = d.call(resync);
  CHECK_FALSE(r.ok());
  CHECK(r.error() == "sync is not configured (no [sync] section in " + d.config.file + ")");

  // A resync goes to the sync service, which answers with its status; its refusal is the error.
  FakeSync sync;
  d.service.set_sync(&sync);
  r = d.call(resync);
  REQUIRE(r.ok());
  CHECK(sync.resyncs == 1);
  CHECK(r.sync_status().enabled());
  CHECK(r.sync_status().bulk_expected() == 1);
  sync.refusal = "sync is not running";
  r = d.call(resync);
  CHECK_FALSE(r.ok());
  CHECK(r.error() == "sync is not running");
  CHECK_FALSE(r.has_sync_status());

  FakeFailover failover;
  d.service.set_failover(&failover);
  r = d.call(make([](Request& q) { q.mutable_failover_demote()->set_amount(5); }));
  REQUIRE(r.ok());
  CHECK(r.failover_status().enabled());
  CHECK(r.failover_status().demotion() == 5);
  r = d.call(health);
  CHECK_FALSE(r.health().healthy());
  CHECK(r.health().reason() == "demoted by the administrator");
  r = d.call(make([](Request& q) { q.mutable_failover_promote()->set_amount(9); }));
  CHECK_FALSE(r.ok());
  CHECK(r.error() == "demotion is 5, cannot promote by 9");
  CHECK_FALSE(r.has_failover_status());
  r = d.call(make([](Request& q) { q.mutable_failover_promote()->set_amount(5); }));
  CHECK(r.ok());
  CHECK(d.call(health).health().healthy());
  r = d.call(make([](Request& q) { q.mutable_failover_set_role()->set_role(FailoverStatus::MASTER); }));
  CHECK(r.failover_status().role() == FailoverStatus::MASTER);
  // Failover hears of every check, even one the engine fails first: keepalived's vrrp_script
  // asking is what says keepalived runs.
  const int asked = failover.health_asked;
  stuck = "queue 0 worker made no progress for 3 s";
  CHECK(d.call(health).health().reason() == "queue 0 worker made no progress for 3 s");
  CHECK(failover.health_asked == asked + 1);
  stuck.reset();

  Request future;
  future.set_version(kControlProtocolVersion + 1);
  future.mutable_status();
  r = d.call(future);
  CHECK_FALSE(r.ok());
  CHECK(r.error() == "unsupported control protocol version 2 (this daemon speaks 1)");

  r = d.call(Request{});
  CHECK_FALSE(r.ok());
  CHECK(r.error().rfind("empty request", 0) == 0);

  // What the control socket answers on its own thread: health and failover alone; the rest waits
  // for the control loop.
  Response at_once;
  CHECK(d.service.handle_at_once(health, at_once));
  CHECK(at_once.ok());
  CHECK(at_once.health().healthy());
  CHECK(d.service.handle_at_once(make([](Request& q) { q.mutable_failover_demote()->set_amount(2); }),
                                 at_once));
  CHECK(at_once.failover_status().demotion() == 2);
  CHECK(d.service.handle_at_once(make([](Request& q) { q.mutable_failover_status(); }), at_once));
  CHECK(d.service.handle_at_once(make([](Request& q) { q.mutable_failover_promote()->set_amount(2); }),
                                 at_once));
  CHECK(d.service.handle_at_once(
      make([](Request& q) { q.mutable_failover_set_role()->set_role(FailoverStatus::BACKUP); }), at_once));
  CHECK(at_once.failover_status().role() == FailoverStatus::BACKUP);
  for (const Request& waits :
       {make([](Request& q) { q.mutable_status(); }), make([](Request& q) { q.mutable_rules_load(); }),
        make([](Request& q) { q.mutable_table_edit(); }), Request{}}) {
    Response untouched;
    CHECK_FALSE(d.service.handle_at_once(waits, untouched));
    CHECK_FALSE(untouched.ok());
    CHECK_FALSE(untouched.has_status());
  }
}

TEST_CASE("service: translation rules without the pre-routing hook are refused", "[service]") {
  Daemon d;
  const std::string nat = d.write("nat.conf",
                                  "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n"
                                  "rdr on wan0 proto tcp to 203.0.113.1 port 80 -> 10.1.0.10\n"
                                  "pass all\n");
  const std::string plain = d.config.rules.file;
  const std::string refused =
      nat +
      ": translation rules (nat, rdr, binat) need the pre-routing hook, which is installed at start: "
      "restart pairwalld to use them";

  SECTION("before the hooks are installed, the start's rule set decides them") {
    const auto loaded = d.service.load_rules(nat);
    INFO(loaded.error);
    CHECK(loaded.ok);
    CHECK(d.engine.rules()->has_translations());
  }

  SECTION("with the hook, translation rules load and go") {
    d.service.set_prerouting_hook(true);
    REQUIRE(d.service.load_rules(nat).ok);
    REQUIRE(d.service.load_rules(plain).ok);
    REQUIRE(d.service.load_rules(nat).ok);
    CHECK(d.engine.rules()->has_translations());

    // rules show lists them apart from the filter rules, numbered on their own.
    const Response r = d.call(make([](Request& x) { x.mutable_rules_show(); }));
    REQUIRE(r.ok());
    REQUIRE(r.rules().translations_size() == 2);
    CHECK(r.rules().translations(0).number() == 0);
    CHECK(r.rules().translations(0).text() == "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1");
    CHECK(r.rules().translations(1).number() == 1);
    CHECK(r.rules().translations(1).text() ==
          "rdr on wan0 proto tcp from any to 203.0.113.1 port 80 -> 10.1.0.10");
    CHECK(r.rules().translations(1).location() == nat + ":2");
    REQUIRE(r.rules().rules_size() == 1);
    CHECK(r.rules().rules(0).number() == 0);
  }

  SECTION("without it, a reload that brings them is refused and the running set stays") {
    REQUIRE(d.service.load_rules(plain).ok);
    d.service.set_prerouting_hook(false);
    Request q;
    q.set_version(kControlProtocolVersion);
    q.mutable_rules_load()->set_path(nat);
    const Response r = d.call(q);
    CHECK_FALSE(r.ok());
    CHECK(r.error() == refused);
    CHECK_FALSE(r.has_rules_loaded());
    CHECK(d.engine.rules()->size() == 3);
    CHECK_FALSE(d.engine.rules()->has_translations());
    CHECK(d.service.rules_file() == plain);
    const Response st = d.call(make([](Request& x) { x.mutable_status(); }));
    CHECK(st.status().rule_reload_failures() == 1);
    MetricWriter metrics;
    d.service.render_metrics(metrics);
    CHECK(metrics.text().find("pairwall_rule_loads_refused_total 1\n") != std::string::npos);

    // SIGHUP of the current file, edited to translate: refused the same way.
    d.write("pf.conf", "nat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\npass all\n");
    const auto sighup = d.service.load_rules("");
    CHECK_FALSE(sighup.ok);
    CHECK_THAT(sighup.error, Catch::Contains("need the pre-routing hook"));
    CHECK(d.engine.rules()->size() == 3);

    // Rules without translation still load.
    d.write("pf.conf", "pass all\n");
    CHECK(d.service.load_rules("").ok);
  }

  SECTION("without it but able to fit the hooks, each set that brings them is fitted before it runs") {
    std::vector<std::size_t> fitted;  // the translation rules of each set fitted
    d.service.set_prerouting_hook(false, [&](const engine::rules::RuleFile& file) {
      CHECK_FALSE(d.engine.rules()->has_translations());  // not running yet
      fitted.push_back(file.translation_rules.size());
    });
    REQUIRE(d.service.load_rules(plain).ok);
    CHECK(fitted.empty());
    const auto loaded = d.service.load_rules(nat);
    INFO(loaded.error);
    REQUIRE(loaded.ok);
    CHECK(fitted == std::vector<std::size_t>{2});
    CHECK(d.engine.rules()->has_translations());
    CHECK(d.call(make([](Request& x) { x.mutable_status(); })).status().prerouting_hook());
    // A set without them asks nothing of the hooks; the next with them is fitted again.
    REQUIRE(d.service.load_rules(plain).ok);
    CHECK(fitted.size() == 1);
    d.service.set_prerouting_hook(
        true, [&](const engine::rules::RuleFile& file) { fitted.push_back(file.translation_rules.size()); });
    REQUIRE(d.service.load_rules(nat).ok);
    CHECK(fitted == std::vector<std::size_t>{2, 2});
  }

  SECTION("a hook that cannot be added refuses the set, and the next load tries again") {
    int tried = 0;
    bool fails = true;
    d.service.set_prerouting_hook(false, [&](const engine::rules::RuleFile&) {
      ++tried;
      if (fails) throw std::runtime_error("iptables -t mangle -N PAIRWALL-next: exit code 4");
    });
    REQUIRE(d.service.load_rules(plain).ok);
    const auto failed = d.service.load_rules(nat);
    CHECK_FALSE(failed.ok);
    CHECK(failed.error == nat +
                              ": translation rules (nat, rdr, binat) need the pre-routing hook: iptables -t "
                              "mangle -N PAIRWALL-next: exit code 4");
    CHECK(tried == 1);
    CHECK_FALSE(d.engine.rules()->has_translations());
    CHECK(d.service.rules_file() == plain);
    fails = false;
    REQUIRE(d.service.load_rules(nat).ok);
    CHECK(tried == 2);
    CHECK(d.engine.rules()->has_translations());
  }

  SECTION("status says whether the hook is in and what it queues beyond the node") {
    const auto status = [&] { return d.call(make([](Request& x) { x.mutable_status(); })).status(); };
    CHECK_FALSE(status().prerouting_hook());
    d.service.set_prerouting_hook(true);
    d.service.set_prerouting_matches({"inet on wan0 proto 6 to any port 80"});
    const Status s = status();
    CHECK(s.prerouting_hook());
    REQUIRE(s.prerouting_matches_size() == 1);
    CHECK(s.prerouting_matches(0) == "inet on wan0 proto 6 to any port 80");
  }

  SECTION("a set refused for another reason adds no hook") {
    int added = 0;
    d.service.set_prerouting_hook(false, [&](const engine::rules::RuleFile&) { ++added; });
    REQUIRE(d.service.load_rules(plain).ok);
    for (uint16_t port = 1; port <= 3; ++port) {
      REQUIRE(d.send(syn("10.0.0.1", static_cast<uint16_t>(40000 + port), "10.9.0.1", 80)).action ==
              engine::Verdict::Action::Accept);
    }
    const auto too_small = d.service.load_rules(
        d.write("small-nat.conf",
                "set limit states 2\nnat on wan0 from 10.1.0.0/16 to any -> 203.0.113.1\n"
                "pass all\n"));
    CHECK_FALSE(too_small.ok);
    CHECK_THAT(too_small.error, Catch::Contains("'set limit states 2' is below the 3 states"));
    CHECK(added == 0);
    CHECK_FALSE(d.engine.rules()->has_translations());
  }
}

TEST_CASE("service: interfaces named as addresses take the host's addresses at each load", "[service]") {
  Daemon d;
  const std::string path = d.write("ifaces.conf",
                                   "pass all\n"
                                   "block in quick from em1:network\n");
  // Without a source of addresses no interface is known.
  auto unknown = d.service.load_rules(path);
  CHECK_FALSE(unknown.ok);
  CHECK(unknown.error ==
        path +
            ":2:21: no interface named 'em1' on this host (write '(em1:network)' to match its addresses "
            "once it exists)");

  engine::rules::InterfaceAddress lan;
  lan.address = *engine::parse_address("10.1.0.1", &lan.family);
  lan.prefix_length = 16;
  bool fail = false;
  d.service.set_interface_addresses([&] {
    if (fail) throw std::runtime_error("getifaddrs: Too many open files");
    return engine::rules::InterfaceAddresses{{"em1", {lan}}};
  });
  REQUIRE(d.service.load_rules(path).ok);
  CHECK(d.send(syn("10.1.2.3", 40000, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  CHECK(d.send(syn("10.2.2.3", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  Response r = d.call(make([](Request& q) { q.mutable_tables()->set_name("em1:network"); }));
  REQUIRE(r.ok());
  CHECK(r.tables().tables(0).is_const());
  REQUIRE(r.tables().tables(0).entries_size() == 1);
  CHECK(r.tables().tables(0).entries(0) == "10.1.0.0/16");

  // A reload reads them again; a host that cannot be asked refuses the reload, the rules stay.
  lan.address = *engine::parse_address("10.2.0.1", &lan.family);
  REQUIRE(d.service.load_rules("").ok);
  CHECK(d.send(syn("10.1.2.3", 40001, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  CHECK(d.send(syn("10.2.2.3", 40001, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  // Addresses that change between loads: the interface tables follow, the rules' counters stay.
  CHECK(d.service.refresh_interface_addresses().changed.empty());
  const auto counted = [&d] {
    return d.call(make([](Request& q) { q.mutable_rules_show(); })).rules().rules(1).packets();
  };
  const uint64_t packets_before = counted();
  CHECK(packets_before > 0);
  lan.address = *engine::parse_address("10.3.0.1", &lan.family);
  auto refreshed = d.service.refresh_interface_addresses();
  CHECK(refreshed.error.empty());
  CHECK(refreshed.changed == std::vector<std::string>{"em1:network"});
  CHECK(counted() == packets_before);
  CHECK(d.send(syn("10.2.2.5", 40002, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  CHECK(d.send(syn("10.3.2.5", 40002, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  fail = true;
  CHECK(d.service.refresh_interface_addresses().error ==
        "cannot read the interfaces' addresses: getifaddrs: Too many open files");
  CHECK(d.send(syn("10.3.2.6", 40002, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  auto refused = d.service.load_rules("");
  CHECK_FALSE(refused.ok);
  CHECK(refused.error == path + ": cannot read the interfaces' addresses: getifaddrs: Too many open files");
  CHECK(d.send(syn("10.3.2.4", 40001, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
}

TEST_CASE("service: an anchor load warns of the rules it brings that never decide, not of the file's",
          "[service][anchors]") {
  Daemon d;
  const std::string path = d.write("anchors.conf",
                                   "pass proto udp to port 53 keep state (max 10)\n"
                                   "pass all\n"
                                   "anchor \"ssh\" in proto tcp\n");
  const auto loaded = d.service.load_rules(path);
  REQUIRE(loaded.ok);
  REQUIRE(loaded.warnings.size() == 1);
  INFO(loaded.warnings[0]);
  CHECK(loaded.warnings[0].starts_with(
      path + ":1:1: warning: this rule never decides: 'pass all keep state' (" + path + ":2)"));
  const auto load = [&d](const std::string& text) {
    Request q = make([](Request& r) { r.mutable_anchor_load(); });
    q.mutable_anchor_load()->set_name("ssh");
    q.mutable_anchor_load()->set_path("ssh-anchor.conf");
    q.mutable_anchor_load()->set_text(text);
    return d.call(q);
  };
  const Response shadowed = load("pass from 192.0.2.7 to port 22\nblock all\n");
  REQUIRE(shadowed.ok());
  REQUIRE(shadowed.anchors().warnings_size() == 1);
  CHECK(shadowed.anchors().warnings(0).starts_with(
      "ssh-anchor.conf:1:1: warning: this rule never decides: 'block all' (ssh-anchor.conf:2)"));
  // Loaded again, the same rules bring nothing new; fixed, nothing either.
  CHECK(load("pass from 192.0.2.7 to port 22\nblock all\n").anchors().warnings_size() == 0);
  CHECK(load("block all\npass from 192.0.2.7 to port 22\n").anchors().warnings_size() == 0);
  CHECK(load("pass from 192.0.2.7 to port 22\nblock all\n").anchors().warnings_size() == 1);
}

TEST_CASE("service: anchors take rules at run time, keep them across reloads, and refuse bad ones whole",
          "[service][anchors]") {
  Daemon d;
  const std::string path = d.write("anchors.conf",
                                   "block all\n"
                                   "anchor \"ssh\" in proto tcp\n"
                                   "anchor \"fixed\" {\n"
                                   "  pass proto udp to port 53\n"
                                   "}\n"
                                   "pass proto tcp to port 80\n");
  REQUIRE(d.service.load_rules(path).ok);
  auto load = [&d](const std::string& name, const std::optional<std::string>& text) {
    Request q = make([](Request& r) { r.mutable_anchor_load(); });
    q.mutable_anchor_load()->set_name(name);
    q.mutable_anchor_load()->set_path("ssh-anchor.conf");
    if (text) {
      q.mutable_anchor_load()->set_text(*text);
    } else {
      q.mutable_anchor_load()->set_flush(true);
    }
    return d.call(q);
  };
  uint16_t port = 40000;  // a new connection each time, which no state already passes
  auto ssh_from = [&d, &port](const std::string& src) { return d.send(syn(src, ++port, "10.9.0.1", 22)); };

  CHECK(ssh_from("192.0.2.7").reason == engine::Reason::RuleBlock);
  Response loaded = load("ssh", "admin = \"192.0.2.7\"\npass from $admin to port 22\n");
  REQUIRE(loaded.ok());
  REQUIRE(loaded.anchors().anchors_size() == 1);
  CHECK(loaded.anchors().anchors(0).name() == "ssh");
  CHECK(loaded.anchors().anchors(0).rules() == 1);
  CHECK(ssh_from("192.0.2.7").action == engine::Verdict::Action::Accept);
  CHECK(ssh_from("192.0.2.8").reason == engine::Reason::RuleBlock);

  // Listed where it stands, numbered within it; the anchors with their terms.
  Response shown = d.call(make([](Request& r) { r.mutable_rules_show(); }));
  // Listed as pfctl -s rules: each anchor's line, @N among the rules where it stands, then its rules.
  REQUIRE(shown.rules().rules_size() == 6);
  CHECK(shown.rules().rules(1).calls_anchor() == "ssh");
  CHECK(shown.rules().rules(1).number() == 1);
  CHECK(shown.rules().rules(1).text() == "anchor \"ssh\" in proto tcp");
  CHECK(shown.rules().rules(2).anchor() == "ssh");
  CHECK(shown.rules().rules(2).number() == 0);
  CHECK(shown.rules().rules(2).text() == "pass from 192.0.2.7 to any port 22 keep state");  // as written
  CHECK(shown.rules().rules(2).evaluations() == 1);
  CHECK(shown.rules().rules(3).calls_anchor() == "fixed");
  CHECK(shown.rules().rules(4).anchor() == "fixed");
  CHECK(shown.rules().rules(5).number() == 3);
  // One anchor's rules, as pfctl -a NAME -s rules.
  Request one = make([](Request& r) { r.mutable_rules_show()->set_anchor("ssh"); });
  Response ssh_rules = d.call(one);
  REQUIRE(ssh_rules.ok());
  REQUIRE(ssh_rules.rules().rules_size() == 1);
  CHECK(ssh_rules.rules().rules(0).anchor() == "ssh");
  one.mutable_rules_show()->set_anchor("nowhere");
  CHECK(d.call(one).error() == "rules: no anchor \"nowhere\" in " + path);
  Response listed = d.call(make([](Request& r) { r.mutable_anchors(); }));
  REQUIRE(listed.anchors().anchors_size() == 2);
  CHECK(listed.anchors().anchors(0).terms() == "in proto tcp");
  CHECK_FALSE(listed.anchors().anchors(0).from_file());
  CHECK(listed.anchors().anchors(1).name() == "fixed");
  CHECK(listed.anchors().anchors(1).from_file());

  // Refused whole, with the place of the error; the running rules stay.
  Response bad = load("ssh", "pass from any to port 22\npass from nowhere to port 22\n");
  CHECK_FALSE(bad.ok());
  CHECK(
      bad.error() ==
      "anchors: ssh-anchor.conf:2:11: no interface named 'nowhere' on this host (write '(nowhere)' to match "
      "its addresses once it exists)");
  Response contradicts = load("ssh", "pass out all\n");
  CHECK_FALSE(contradicts.ok());
  CHECK(contradicts.error() ==
        "anchors: ssh-anchor.conf:1:1: the rule can never match: its direction is not "
        "that of anchor \"ssh\" (" +
            path + ":2)");
  Response undeclared = load("telnet", "pass all\n");
  CHECK(undeclared.error() ==
        "anchors: no anchor \"telnet\" in " + path + ": declare it there with anchor \"telnet\"");
  CHECK(ssh_from("192.0.2.7").action == engine::Verdict::Action::Accept);

  // A reload of the rule file keeps what was loaded into the anchor, and sets back the anchors
  // whose rules the file gives.
  REQUIRE(load("fixed", "block all\n").ok());
  REQUIRE(d.service.load_rules("").ok);
  CHECK(ssh_from("192.0.2.7").action == engine::Verdict::Action::Accept);
  listed = d.call(make([](Request& r) { r.mutable_anchors(); }));
  CHECK(listed.anchors().anchors(1).rules() == 1);
  shown = d.call(make([](Request& r) { r.mutable_rules_show(); }));
  CHECK(shown.rules().rules(4).text() == "pass proto udp from any to any port 53 keep state");

  REQUIRE(load("ssh", std::nullopt).ok());
  CHECK(ssh_from("192.0.2.7").reason == engine::Reason::RuleBlock);
  REQUIRE(d.service.load_rules("").ok);
  CHECK(ssh_from("192.0.2.7").reason == engine::Reason::RuleBlock);
}

TEST_CASE("service: rule counters as pf keeps them across rule file and anchor loads", "[service][anchors]") {
  // pfctl -f replaces the main rules and the anchors the file defines: their counters start at zero,
  // while an anchor the file only calls keeps its rules, and their counters, as they were. pfctl -a
  // NAME -f replaces that anchor's rules alone: theirs start at zero, the others' go on.
  Daemon d;
  const std::string path =
      d.write("counted.conf", "block all\nanchor \"ssh\" in proto tcp\npass proto tcp to port 80\n");
  REQUIRE(d.service.load_rules(path).ok);
  auto load_ssh = [&d] {
    Request q = make([](Request& r) { r.mutable_anchor_load(); });
    q.mutable_anchor_load()->set_name("ssh");
    q.mutable_anchor_load()->set_path("ssh.conf");
    q.mutable_anchor_load()->set_text("pass to port 22\n");
    return d.call(q);
  };
  // The packets a rule of `anchor` (not an anchor's own line) passed, by its place among them.
  auto packets = [&d](const std::string& anchor, int index) -> int64_t {
    const Response shown = d.call(make([](Request& r) { r.mutable_rules_show(); }));
    int seen = 0;
    for (const auto& rule : shown.rules().rules()) {
      if (!rule.calls_anchor().empty() || rule.anchor() != anchor) continue;
      if (seen++ == index) return static_cast<int64_t>(rule.packets());
    }
    return -1;
  };
  uint16_t port = 40000;  // a new connection each time, which no state already passes
  auto connect = [&d, &port](uint16_t to) {
    REQUIRE(d.send(syn("192.0.2.7", ++port, "10.9.0.1", to)).action == engine::Verdict::Action::Accept);
  };
  REQUIRE(load_ssh().ok());
  connect(22);
  connect(80);
  REQUIRE(packets("ssh", 0) == 1);
  REQUIRE(packets("", 1) == 1);

  REQUIRE(d.service.load_rules("").ok);
  CHECK(packets("ssh", 0) == 1);
  CHECK(packets("", 1) == 0);

  connect(22);
  connect(80);
  REQUIRE(load_ssh().ok());
  CHECK(packets("ssh", 0) == 0);
  CHECK(packets("", 1) == 1);
}

// pf's `set keepcounters`: a reload finds the rules written alike in the running set and keeps
// their counters (filter and scrub rules here); a rule new or changed starts at zero, and a file
// without it resets them all, as before.
TEST_CASE("service: set keepcounters keeps the counters of the rules a reload finds written alike",
          "[service]") {
  Daemon d;
  const std::string kept = "set keepcounters\nscrub in all\nblock all\npass proto tcp to port 80\n";
  const std::string path = d.write("kept.conf", kept);
  REQUIRE(d.service.load_rules(path).ok);
  uint16_t port = 40000;
  auto connect = [&d, &port] {
    REQUIRE(d.send(syn("192.0.2.7", ++port, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  };
  auto shown = [&d] { return d.call(make([](Request& r) { r.mutable_rules_show(); })).rules(); };
  connect();
  connect();
  REQUIRE(shown().rules(1).packets() == 2);
  REQUIRE(shown().scrubs(0).packets() == 2);

  // The same file again, and one with a rule added before the web rule: both keep its counts.
  REQUIRE(d.service.load_rules(path).ok);
  CHECK(shown().rules(1).packets() == 2);
  CHECK(shown().scrubs(0).packets() == 2);
  d.write("kept.conf",
          "set keepcounters\nscrub in all\nblock all\npass proto tcp to port 22\n"
          "pass proto tcp to port 80\n");
  REQUIRE(d.service.load_rules(path).ok);
  REQUIRE(shown().rules_size() == 3);
  CHECK(shown().rules(1).packets() == 0);
  CHECK(shown().rules(2).packets() == 2);
  connect();
  CHECK(shown().rules(2).packets() == 3);
  CHECK(shown().scrubs(0).packets() == 3);

  // Without the setting, a reload starts every rule at zero.
  d.write("kept.conf", "scrub in all\nblock all\npass proto tcp to port 22\npass proto tcp to port 80\n");
  REQUIRE(d.service.load_rules(path).ok);
  CHECK(shown().rules(2).packets() == 0);
  CHECK(shown().scrubs(0).packets() == 0);
}

TEST_CASE(
    "service: anchors loaded within loaded anchors are placed again on reload, and go with their parent",
    "[service][anchors]") {
  Daemon d;
  const std::string path = d.write("nested.conf", "block all\nanchor \"site\"\n");
  REQUIRE(d.service.load_rules(path).ok);
  auto load = [&d](const std::string& name, const std::string& text) {
    Request q = make([](Request& r) { r.mutable_anchor_load(); });
    q.mutable_anchor_load()->set_name(name);
    q.mutable_anchor_load()->set_path(name + ".conf");
    q.mutable_anchor_load()->set_text(text);
    return d.call(q);
  };
  auto names = [&d] {
    std::string out;
    const Response listed = d.call(make([](Request& r) { r.mutable_anchors(); }));
    for (const auto& a : listed.anchors().anchors()) out += a.name() + ":" + std::to_string(a.rules()) + " ";
    return out;
  };
  uint16_t port = 40000;
  auto web = [&d, &port] { return d.send(syn("192.0.2.9", ++port, "10.9.0.1", 443)).action; };

  REQUIRE(load("site", "pass proto udp\nanchor \"web\" proto tcp\n").ok());
  REQUIRE(load("site/web", "pass to port 443\n").ok());
  CHECK(names() == "site:1 site/web:1 ");
  CHECK(web() == engine::Verdict::Action::Accept);

  REQUIRE(d.service.load_rules("").ok);
  CHECK(names() == "site:1 site/web:1 ");
  CHECK(web() == engine::Verdict::Action::Accept);

  // New rules for the parent declare its anchors anew: what was loaded into the old ones goes.
  REQUIRE(load("site", "anchor \"web\" proto tcp\n").ok());
  CHECK(names() == "site:0 site/web:0 ");
  CHECK(web() == engine::Verdict::Action::Drop);
  REQUIRE(d.service.load_rules("").ok);
  CHECK(names() == "site:0 site/web:0 ");
}

// pfctl -s timeouts and -s memory: what the running rules set, pf's defaults for the rest, and the
// adaptive scaling as the expiry applies it to the states there are now.
TEST_CASE("service: settings show the running rules' timeouts and limits", "[service]") {
  Daemon d;
  auto settings = [&d] {
    const Response r = d.call(make([](Request& q) { q.mutable_settings(); }));
    REQUIRE(r.ok());
    return r.settings();
  };
  auto seconds = [](const Settings& s, const std::string& name) -> int64_t {
    for (const auto& t : s.timeouts())
      if (t.name() == name) return static_cast<int64_t>(t.seconds());
    return -1;
  };
  const std::string path = d.write("settings.conf",
                                   "set limit { states 1000, src-nodes 50, table-entries 3000 }\n"
                                   "set timeout { tcp.established 7200, udp.first 20, src.track 30 }\n"
                                   "set block-policy return\n"
                                   "set skip on lo\n"
                                   "pass all\n");
  REQUIRE(d.service.load_rules(path).ok);
  Settings s = settings();
  REQUIRE(s.timeouts_size() == static_cast<int>(engine::kTimeoutClassCount) + 1);
  CHECK(s.timeouts(0).name() == "tcp.first");
  CHECK(seconds(s, "tcp.first") == 120);
  CHECK(seconds(s, "tcp.established") == 7200);
  CHECK(seconds(s, "udp.first") == 20);
  CHECK(seconds(s, "udp.multiple") == 60);
  CHECK(s.timeouts(s.timeouts_size() - 1).name() == "src.track");
  CHECK(seconds(s, "src.track") == 30);
  CHECK(s.state_limit() == 1000);
  CHECK(s.source_node_limit() == 50);
  CHECK(s.table_entry_limit() == 3000);
  CHECK(s.block_policy_return());
  CHECK(s.skip_interfaces_size() == 1);
  // Unset adaptive bounds follow the state limit, as pf's do; no states yet, no scaling.
  CHECK(s.adaptive_start() == 600);
  CHECK(s.adaptive_end() == 1200);
  CHECK(s.timeout_scale() == 1.0);

  const std::string scaled = d.write("scaled.conf",
                                     "set timeout { adaptive.start 2, adaptive.end 6 }\n"
                                     "pass all\n");
  REQUIRE(d.service.load_rules(scaled).ok);
  for (uint16_t port = 1; port <= 4; ++port) {
    REQUIRE(d.send(syn("10.0.0.1", static_cast<uint16_t>(40000 + port), "10.9.0.1", 80)).action ==
            engine::Verdict::Action::Accept);
  }
  s = settings();
  CHECK(s.states() == 4);
  CHECK(s.adaptive_start() == 2);
  CHECK(s.adaptive_end() == 6);
  CHECK(s.timeout_scale() == Approx(0.5));  // (6 - 4) / (6 - 2)
  CHECK(s.state_limit() == 100000);         // pf's default again
  CHECK_FALSE(s.block_policy_return());

  const std::string off = d.write("off.conf", "set timeout { adaptive.start 0, adaptive.end 0 }\npass all\n");
  REQUIRE(d.service.load_rules(off).ok);
  s = settings();
  CHECK(s.adaptive_start() == 0);
  CHECK(s.adaptive_end() == 0);
  CHECK(s.timeout_scale() == 1.0);
}

TEST_CASE(
    "service: settings show the state limit in force, [engine] state_limit's where it overrides the file's",
    "[service]") {
  // As pfctl -s memory shows the hard limit the table holds to: the adaptive timeouts beside it
  // are reckoned from that one too.
  Daemon d;
  d.service.set_state_limit(50);
  REQUIRE(d.service.load_rules(d.write("limits.conf", "set limit states 1000\npass all\n")).ok);
  const Response r = d.call(make([](Request& q) { q.mutable_settings(); }));
  REQUIRE(r.ok());
  CHECK(r.settings().state_limit() == 50);
  CHECK(r.settings().adaptive_start() == 30);  // 60 % of it
  CHECK(r.settings().adaptive_end() == 60);    // 120 %
}

TEST_CASE("service: states list the time they have left as adaptive timeouts scale it, as pfctl -s states",
          "[service]") {
  // pfctl shows pf_state_expires(): past adaptive.start, the timeout shrunk by the table's size.
  Daemon d;
  const std::string path = d.write("adaptive.conf",
                                   "set timeout { udp.first 60, adaptive.start 2, adaptive.end 6 }\n"
                                   "pass all\n");
  REQUIRE(d.service.load_rules(path).ok);
  const auto flow = [](uint16_t port) {
    return PacketBuilder().ipv4("10.0.0.1", "10.9.0.1").udp(port, 53).payload(8).build();
  };
  REQUIRE(d.send(flow(40001)).action == engine::Verdict::Action::Accept);
  auto listed = [&d] {
    Request q;
    q.mutable_states();
    const Response r = d.call(q);
    REQUIRE(r.ok());
    REQUIRE(r.states().states_size() >= 1);
    return r.states().states(0).expires_in_ms();
  };
  // Below adaptive.start: the whole timeout.
  CHECK(listed() == 60'000);
  // Four states of the six at which timeouts reach nothing: half of it.
  for (uint16_t port = 40002; port <= 40004; ++port)
    REQUIRE(d.send(flow(port)).action == engine::Verdict::Action::Accept);
  CHECK(listed() == 30'000);
}

TEST_CASE("service: a reload whose state limit is below the states held is refused, as pf refuses it",
          "[service]") {
  // pf's DIOCSETLIMIT fails (EBUSY) below the states in use, and pfctl loads nothing. Taken, the
  // adaptive timeouts' end (120 % of the limit by default) lay below the table's size: every
  // state, established connections too, went at the next expiry pass.
  Daemon d;
  REQUIRE(d.service.load_rules(d.write("open.conf", "pass all\n")).ok);
  for (uint16_t port = 1; port <= 10; ++port) {
    REQUIRE(d.send(syn("10.0.0.1", static_cast<uint16_t>(40000 + port), "10.9.0.1", 80)).action ==
            engine::Verdict::Action::Accept);
  }
  const uint32_t limit = d.engine.states().limit();
  const auto refused = d.service.load_rules(d.write("small.conf", "set limit states 8\npass all\n"));
  CHECK_FALSE(refused.ok);
  CHECK(refused.error.find("'set limit states 8' is below the 10 states") != std::string::npos);
  CHECK(d.engine.states().limit() == limit);
  d.engine.expire(d.now);
  CHECK(d.engine.states().size() == 10);
  // At or above the states held, the limit is taken (and the timeouts scaled, not ended).
  REQUIRE(d.service.load_rules(d.write("fits.conf", "set limit states 10\npass all\n")).ok);
  CHECK(d.engine.states().limit() == 10);
  d.engine.expire(d.now);
  CHECK(d.engine.states().size() == 10);
}

TEST_CASE(
    "service: a reload whose src-nodes limit is below the source nodes held is refused, as pf refuses it",
    "[service]") {
  // pf's DIOCSETLIMIT refuses every pool's limit below what is in use (EBUSY), src-nodes as states.
  // Taken, every new connection a source-tracking rule would pass from a new source was refused
  // until enough source nodes had gone.
  Daemon d;
  const std::string tracked = "pass proto tcp to port 80 keep state (max-src-states 100)\n";
  REQUIRE(d.service.load_rules(d.write("open.conf", tracked)).ok);
  for (int host = 1; host <= 10; ++host) {
    REQUIRE(d.send(syn("10.0.0." + std::to_string(host), 40000, "10.9.0.1", 80)).action ==
            engine::Verdict::Action::Accept);
  }
  REQUIRE(d.engine.sources().size() == 10);
  const uint32_t limit = d.engine.sources().limit();
  const auto refused = d.service.load_rules(d.write("small.conf", "set limit src-nodes 8\n" + tracked));
  CHECK_FALSE(refused.ok);
  CHECK(refused.error.find("'set limit src-nodes 8' is below the 10 source nodes") != std::string::npos);
  CHECK(d.engine.sources().limit() == limit);
  CHECK(d.send(syn("10.0.0.11", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  // At or above the source nodes held, the limit is taken.
  REQUIRE(d.service.load_rules(d.write("fits.conf", "set limit src-nodes 11\n" + tracked)).ok);
  CHECK(d.engine.sources().limit() == 11);
}

TEST_CASE("service: sources kill and flush sources remove source nodes, their states going on (pfctl -K)",
          "[service][source]") {
  Daemon d;
  REQUIRE(
      d.service
          .load_rules(d.write("tracked.conf", "pass proto tcp to port 80 keep state (max-src-states 1)\n"))
          .ok);
  for (const char* host : {"10.0.0.1", "10.0.1.1", "10.0.1.2"})
    REQUIRE(d.send(syn(host, 40000, "10.9.0.1", 80)).reason == engine::Reason::Match);
  // A prefix holds addresses of its own family only.
  REQUIRE(d.send(PacketBuilder()
                     .ipv6("::ffff:10.0.1.3", "2001:db8::80")
                     .tcp(40000, 80)
                     .flags(tcpflag::kSyn)
                     .build())
              .reason == engine::Reason::Match);
  REQUIRE(d.send(syn("10.0.1.1", 40001, "10.9.0.1", 80)).reason == engine::Reason::SourceLimit);
  REQUIRE(d.engine.sources().size() == 4);

  const Response bad = d.call(make([](Request& q) { q.mutable_kill_sources()->set_address("10.0.1.0/33"); }));
  CHECK_FALSE(bad.ok());
  CHECK(bad.error() == "sources kill: '10.0.1.0/33' is not an address or prefix (e.g. 10.0.0.1, 10.0.0.0/8)");
  CHECK(d.engine.sources().size() == 4);

  const Response killed =
      d.call(make([](Request& q) { q.mutable_kill_sources()->set_address("10.0.1.0/24"); }));
  REQUIRE(killed.ok());
  CHECK(killed.sources_killed().sources() == 2);
  CHECK(killed.sources_killed().states() == 2);
  CHECK(d.engine.sources().size() == 2);
  CHECK(d.engine.states().size() == 4);
  CHECK(d.send(syn("10.0.1.1", 40001, "10.9.0.1", 80)).reason == engine::Reason::Match);
  CHECK(d.send(syn("10.0.0.1", 40001, "10.9.0.1", 80)).reason == engine::Reason::SourceLimit);

  const Response flushed = d.call(make([](Request& q) { q.mutable_kill_sources(); }));
  REQUIRE(flushed.ok());
  CHECK(flushed.sources_killed().sources() == 3);
  CHECK(flushed.sources_killed().states() == 3);
  CHECK(d.engine.sources().size() == 0);
  CHECK(d.engine.states().size() == 5);
}

TEST_CASE("service: a tagged that no rule tags loads with a warning", "[service][tag]") {
  Daemon d;
  d.service.set_interface_addresses([] {
    return engine::rules::InterfaceAddresses{{"lan0", {}}, {"wan0", {}}};
  });
  const std::string path = d.write("tags.conf",
                                   "block all\n"
                                   "pass in on lan0 tag WEB\n"
                                   "pass out on wan0 tagged WBE\n"
                                   "pass out on wan0 tagged WEB\n");
  Request load;
  load.set_version(kControlProtocolVersion);
  load.mutable_rules_load()->set_path(path);
  const Response loaded = d.call(load);
  REQUIRE(loaded.ok());
  REQUIRE(loaded.rules_loaded().warnings_size() == 1);
  CHECK(loaded.rules_loaded().warnings(0) ==
        path + ":3:25: warning: no rule tags 'WBE': 'tagged WBE' never matches");
}

TEST_CASE("service: (tun0) of an interface not there yet loads with a warning and follows it once it comes",
          "[service]") {
  Daemon d;
  engine::rules::InterfaceAddresses host{{"em1", {}}};
  d.service.set_interface_addresses([&host] { return host; });
  const std::string path = d.write("tun.conf", "pass all\nblock in quick from (tun0:network)\n");
  Request load;
  load.set_version(kControlProtocolVersion);
  load.mutable_rules_load()->set_path(path);
  const Response loaded = d.call(load);
  REQUIRE(loaded.ok());
  REQUIRE(loaded.rules_loaded().warnings_size() == 1);
  CHECK(loaded.rules_loaded().warnings(0) == path +
                                                 ":2:21: warning: no interface named 'tun0' on this host "
                                                 "yet: (tun0:network) matches no address until "
                                                 "it has an address");
  CHECK(d.send(syn("10.8.0.9", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);

  engine::rules::InterfaceAddress tunnel;
  tunnel.address = *engine::parse_address("10.8.0.1", &tunnel.family);
  tunnel.prefix_length = 24;
  host["tun0"] = {tunnel};
  CHECK(d.service.refresh_interface_addresses().changed == std::vector<std::string>{"tun0:network"});
  CHECK(d.send(syn("10.8.0.9", 40001, "10.9.0.1", 80)).reason == engine::Reason::RuleBlock);
  // Once there, a reload has nothing to warn of.
  CHECK(d.call(load).rules_loaded().warnings_size() == 0);
}

TEST_CASE("service: states name the interfaces an if-bound state is bound to, as pfctl -s states does",
          "[service]") {
  Daemon d;
  const std::string path = d.write("bound.conf",
                                   "set state-policy if-bound\n"
                                   "pass in all\n"
                                   "pass out proto udp to port 53 keep state (floating)\n"
                                   "pass out proto udp to port 123\n");
  REQUIRE(d.service.load_rules(path).ok);
  engine::PacketMeta meta;
  meta.hook = engine::Hook::Forward;
  meta.in_iface = d.engine.interfaces().intern("lan0");
  meta.out_iface = d.engine.interfaces().intern("wan0");
  for (const uint16_t port : {53, 123}) {
    Bytes p = PacketBuilder().ipv4("10.0.0.1", "10.9.0.1").udp(40000, port).payload(8).build();
    REQUIRE(d.engine.process(d.data_plane.worker, p, meta, d.now).action == engine::Verdict::Action::Accept);
  }
  Request q;
  q.mutable_states();
  const Response r = d.call(q);
  REQUIRE(r.ok());
  REQUIRE(r.states().states_size() == 2);
  for (const auto& s : r.states().states()) {
    INFO("port " << s.dst().port());
    CHECK(s.bound_in() == "lan0");
    CHECK(s.bound_out() == (s.dst().port() == 123 ? "wan0" : ""));
  }

  // `on IF` (pfctl -i IF -s states): the states bound to IF on either pass.
  d.engine.interfaces().intern("lan1");
  const auto listed_on = [&d](const std::string& name) {
    Request on;
    on.mutable_states()->mutable_filter()->set_interface(name);
    const Response listed = d.call(on);
    REQUIRE(listed.ok());
    std::vector<uint32_t> ports;
    for (const auto& s : listed.states().states()) ports.push_back(s.dst().port());
    std::sort(ports.begin(), ports.end());
    return ports;
  };
  CHECK(listed_on("lan0") == std::vector<uint32_t>{53, 123});
  CHECK(listed_on("wan0") == std::vector<uint32_t>{123});
  CHECK(listed_on("lan1").empty());  // an interface of this node no state is bound to
  CHECK(listed_on("nosuch0").empty());
  Request bad;
  bad.mutable_states()->mutable_filter()->set_interface("a/b");
  CHECK(d.call(bad).error() == "states: on 'a/b' is not an interface name");

  Request kill;
  kill.mutable_kill_states()->mutable_filter()->set_interface("wan0");
  REQUIRE(d.call(kill).ok());
  CHECK(listed_on("lan0") == std::vector<uint32_t>{53});
}

TEST_CASE("service: a shared table's changes go to the peer whole, dated, and only changes",
          "[service][sync]") {
  Daemon d;
  FakeSync sync;
  d.service.set_sync(&sync);
  const std::string path = d.write("shared.conf",
                                   "table <bruteforce> persist\n"
                                   "table <local> persist\n"
                                   "table <feed> { 192.0.2.0/24 }\n"
                                   "block quick from { <bruteforce> <local> <feed> }\n"
                                   "pass all\n");
  REQUIRE(d.service.load_rules(path).ok);
  d.service.share_tables({"bruteforce", "feed", "absent"});
  CHECK(sync.shared.empty());  // what a table holds when shared is not news to the peer

  auto edit = [&d](const std::string& name, TableEdit::Op op, std::vector<std::string> addresses) {
    Request q = make([](Request& r) { r.mutable_table_edit(); });
    q.mutable_table_edit()->set_name(name);
    q.mutable_table_edit()->set_op(op);
    for (const auto& a : addresses) q.mutable_table_edit()->add_addresses(a);
    return d.call(q);
  };
  engine::SourceOverload o;
  std::snprintf(o.table.data(), o.table.size(), "bruteforce");
  o.address = engine::IpAddress::v4(0x0a000001);
  REQUIRE(d.service.apply_overloads(std::span(&o, 1)).added.size() == 1);
  REQUIRE(sync.shared.size() == 1);
  CHECK(sync.shared[0].first == "bruteforce");
  REQUIRE(sync.shared[0].second.size() == 1);
  CHECK(sync.shared[0].second[0].entry.prefix == engine::IpPrefix{engine::Family::V4, o.address, 32});
  CHECK(sync.shared[0].second[0].age_s == 0);

  d.now += Millis{30'000};
  REQUIRE(edit("bruteforce", TableEdit::ADD, {"10.0.0.2", "!10.9.0.0/16"}).ok());
  REQUIRE(sync.shared.size() == 2);
  REQUIRE(sync.shared[1].second.size() == 3);
  for (const auto& e : sync.shared[1].second) {
    const bool first = e.entry.prefix.address == o.address;
    CHECK(e.age_s == (first ? 30u : 0u));
  }
  // Not shared, or nothing changed: nothing sent.
  REQUIRE(edit("local", TableEdit::ADD, {"10.0.0.3"}).ok());
  REQUIRE(edit("bruteforce", TableEdit::ADD, {"10.0.0.2"}).ok());
  REQUIRE(d.service.load_rules("").ok);
  CHECK(sync.shared.size() == 2);
  // A reload whose file changes a shared table's entries: sent.
  d.write("shared.conf",
          "table <bruteforce> persist\n"
          "table <local> persist\n"
          "table <feed> { 192.0.2.0/24 198.51.100.0/24 }\n"
          "block quick from { <bruteforce> <local> <feed> }\n"
          "pass all\n");
  REQUIRE(d.service.load_rules("").ok);
  REQUIRE(sync.shared.size() == 3);
  CHECK(sync.shared[2].first == "feed");
  CHECK(sync.shared[2].second.size() == 2);
  REQUIRE(edit("bruteforce", TableEdit::FLUSH, {}).ok());
  REQUIRE(sync.shared.size() == 4);
  CHECK(sync.shared[3].second.empty());
  // No longer shared after a reload of [sync] tables.
  d.service.share_tables({"feed"});
  REQUIRE(edit("bruteforce", TableEdit::ADD, {"10.0.0.4"}).ok());
  CHECK(sync.shared.size() == 4);
}

TEST_CASE(
    "service: the peer's version of a shared table replaces this node's, dated as the peer's and not sent "
    "back",
    "[service][sync]") {
  Daemon d;
  FakeSync sync;
  d.service.set_sync(&sync);
  REQUIRE(d.service
              .load_rules(d.write("peer.conf",
                                  "table <bruteforce> persist { 10.0.0.9 }\n"
                                  "table <fixed> const { 10.1.0.0/16 }\n"
                                  "table <other> persist\n"
                                  "block quick from <bruteforce>\n"
                                  "pass all\n"))
              .ok);
  d.service.share_tables({"bruteforce", "fixed", "missing"});
  const auto host = [](uint32_t a, uint32_t age_s) {
    return engine::AgedTableEntry{{false, {engine::Family::V4, engine::IpAddress::v4(a), 32}}, age_s};
  };
  const std::vector<engine::AgedTableEntry> peer = {host(0x0a000001, 100), host(0x0a000002, 5)};
  CHECK(d.send(syn("10.0.0.1", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);

  const auto taken = d.service.take_peer_table("bruteforce", peer);
  CHECK(taken.error.empty());
  CHECK(taken.added == 2);
  CHECK(taken.deleted == 1);
  CHECK(sync.shared.empty());
  CHECK(d.send(syn("10.0.0.1", 40001, "10.9.0.1", 80)).action == engine::Verdict::Action::Drop);
  CHECK(d.send(syn("10.0.0.9", 40002, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
  // The same again changes nothing; its entries' ages are the peer's: 10.0.0.1 came 100 s ago there.
  CHECK(d.service.take_peer_table("bruteforce", peer).added == 0);
  Request q = make([](Request& r) { r.mutable_table_edit(); });
  q.mutable_table_edit()->set_name("bruteforce");
  q.mutable_table_edit()->set_op(TableEdit::EXPIRE);
  q.mutable_table_edit()->set_seconds(50);
  const Response expired = d.call(q);
  REQUIRE(expired.ok());
  CHECK(expired.tables().deleted() == 1);
  // A change of this node's own after it goes to the peer.
  REQUIRE(sync.shared.size() == 1);
  CHECK(sync.shared[0].second.size() == 1);

  CHECK(d.service.take_peer_table("other", peer).error == "<other> is not in [sync] tables here");
  CHECK(d.service.take_peer_table("missing", peer).error.starts_with("no table <missing> in "));
  CHECK(d.service.take_peer_table("fixed", peer).error.starts_with("<fixed> is const in "));
  MetricWriter metrics;
  d.service.render_metrics(metrics);
  CHECK(metrics.text().find("pairwall_shared_tables_refused_total 3\n") != std::string::npos);
}

TEST_CASE("service: a peer's shared table past 'set limit table-entries' is refused and the table stays",
          "[service][sync]") {
  Daemon d;
  REQUIRE(d.service
              .load_rules(d.write("limit.conf",
                                  "set limit table-entries 3\n"
                                  "table <bruteforce> persist { 10.0.0.9 }\n"
                                  "block quick from <bruteforce>\n"
                                  "pass all\n"))
              .ok);
  d.service.share_tables({"bruteforce"});
  std::vector<engine::AgedTableEntry> peer;
  for (uint32_t i = 1; i <= 4; ++i)
    peer.push_back({{false, {engine::Family::V4, engine::IpAddress::v4(i), 32}}, 0});
  const auto refused = d.service.take_peer_table("bruteforce", peer);
  CHECK(refused.error == "the tables would hold 4 entries, over the limit of 3 (set limit table-entries)");
  CHECK(d.send(syn("10.0.0.9", 40000, "10.9.0.1", 80)).action == engine::Verdict::Action::Drop);
  peer.pop_back();
  CHECK(d.service.take_peer_table("bruteforce", peer).error.empty());
  CHECK(d.send(syn("10.0.0.9", 40001, "10.9.0.1", 80)).action == engine::Verdict::Action::Accept);
}
