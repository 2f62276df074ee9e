// pairwallctl's human-readable numbers, at the edges where one decimal rounds up into the next unit.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "tools/ctl/format.h"

using pairwall::ctl::human_bytes;
using pairwall::ctl::human_duration_ms;

TEST_CASE("pairwallctl: sizes and durations never read as a full unit below the next", "[ctl]") {
  struct Case {
    uint64_t value;
    std::string text;
  };
  const Case bytes[] = {
      {0, "0 B"},
      {999, "999 B"},
      {1'000, "1.0 KB"},
      {1'500, "1.5 KB"},
      {999'949, "999.9 KB"},
      {999'950, "1.0 MB"},
      {999'999, "1.0 MB"},
      {1'000'000, "1.0 MB"},
      {12'340'000, "12.3 MB"},
      {999'999'999'999, "1.0 TB"},
  };
  for (const Case& c : bytes) {
    INFO(c.value);
    CHECK(human_bytes(c.value) == c.text);
  }
  const Case durations[] = {
      {0, "0.0s"},       {12'345, "12.3s"},     {59'949, "59.9s"},    {59'999, "59.9s"},
      {60'000, "1m00s"}, {3'599'999, "59m59s"}, {3'600'000, "1h00m"}, {90'061'000, "1d01h"},
  };
  for (const Case& c : durations) {
    INFO(c.value);
    CHECK(human_duration_ms(c.value) == c.text);
  }
}

TEST_CASE("pairwallctl settings: timeouts as pfctl -s timeouts, then the hard limits", "[ctl]") {
  pairwall::control::Settings s;
  for (const auto& [name, seconds] :
       {std::pair{"tcp.first", 120}, {"tcp.established", 86400}, {"src.track", 0}}) {
    auto* t = s.add_timeouts();
    t->set_name(name);
    t->set_seconds(static_cast<uint64_t>(seconds));
  }
  s.set_adaptive_start(60000);
  s.set_adaptive_end(120000);
  s.set_states(90000);
  s.set_timeout_scale(0.5);
  s.set_state_limit(100000);
  s.set_source_node_limit(10000);
  s.set_table_entry_limit(200000);
  s.add_skip_interfaces("lo");
  CHECK(pairwall::ctl::format_settings(s) ==
        "tcp.first                   120s\n"
        "tcp.established           86400s\n"
        "src.track                     0s\n"
        "adaptive.start            60000 states\n"
        "adaptive.end             120000 states\n"
        "timeouts scaled by        0.500 (90000 states)\n"
        "\n"
        "states               hard limit     100000\n"
        "src-nodes            hard limit      10000\n"
        "table-entries        hard limit     200000\n"
        "\n"
        "block-policy drop\n"
        "skip on lo\n");
  s.set_adaptive_start(0);
  s.set_adaptive_end(0);
  s.clear_skip_interfaces();
  s.set_block_policy_return(true);
  const std::string off = pairwall::ctl::format_settings(s);
  CHECK(off.find("adaptive timeouts    off\n") != std::string::npos);
  CHECK(off.find("scaled") == std::string::npos);
  CHECK(off.find("block-policy return\n") != std::string::npos);
  CHECK(off.find("skip on") == std::string::npos);
}

// pfctl -s states: the ports of TCP and UDP, an ICMP query's identifier, and nothing for a
// protocol that has neither (ESP, GRE), whose key holds zeros there.
TEST_CASE("pairwallctl: states show an identifier for ICMP alone", "[ctl]") {
  pairwall::control::StateList list;
  list.set_total(2);
  list.set_matched(2);
  for (const uint32_t proto : {1u, 50u}) {
    auto* s = list.add_states();
    s->set_proto(proto);
    s->set_family(4);
    s->mutable_src()->set_address("10.0.0.1");
    s->mutable_src()->set_port(proto == 1 ? 22 : 0);
    s->mutable_dst()->set_address("10.9.0.1");
    s->mutable_dst()->set_port(proto == 1 ? 8 : 0);
    s->set_src_state("SINGLE");
    s->set_dst_state("NO_TRAFFIC");
    s->set_rule(0);
  }
  const std::string text = pairwall::ctl::format_states(list, false);
  CHECK(text.find("icmp 10.0.0.1 -> 10.9.0.1 id 22  SINGLE:NO_TRAFFIC\n") != std::string::npos);
  CHECK(text.find("proto-50 10.0.0.1 -> 10.9.0.1  SINGLE:NO_TRAFFIC\n") != std::string::npos);
}

TEST_CASE("pairwallctl: states say which shift their numbers and which are scrubbed", "[ctl]") {
  pairwall::control::StateList list;
  list.set_total(3);
  list.set_matched(3);
  for (int i = 0; i < 3; ++i) {
    auto* s = list.add_states();
    s->set_proto(6);
    s->set_family(4);
    s->set_id(static_cast<uint64_t>(i + 1));
    s->set_creator(1);
    s->mutable_src()->set_address("10.0.0.1");
    s->mutable_src()->set_port(static_cast<uint32_t>(40000 + i));
    s->mutable_dst()->set_address("192.0.2.1");
    s->mutable_dst()->set_port(80);
    s->set_src_state("ESTABLISHED");
    s->set_dst_state("ESTABLISHED");
    s->set_modulated(i != 1);
    s->set_scrub_tcp(i != 0);
  }
  const std::string text = pairwall::ctl::format_states(list, false);
  CHECK(text.find("rule @0, modulated, id 1:1\n") != std::string::npos);
  CHECK(text.find("rule @0, scrubbed, id 1:2\n") != std::string::npos);
  CHECK(text.find("rule @0, modulated, scrubbed, id 1:3\n") != std::string::npos);
}

TEST_CASE("pairwallctl: states say which interfaces an if-bound state is bound to", "[ctl]") {
  pairwall::control::StateList list;
  list.set_total(4);
  list.set_matched(4);
  const std::pair<const char*, const char*> bound[] = {
      {"", ""}, {"lan0", "wan0"}, {"lan0", ""}, {"", "wan0"}};
  for (int i = 0; i < 4; ++i) {
    auto* s = list.add_states();
    s->set_proto(17);
    s->set_family(4);
    s->set_id(static_cast<uint64_t>(i + 1));
    s->set_creator(1);
    s->mutable_src()->set_address("10.0.0.1");
    s->mutable_dst()->set_address("192.0.2.1");
    s->set_bound_in(bound[i].first);
    s->set_bound_out(bound[i].second);
  }
  const std::string text = pairwall::ctl::format_states(list, false);
  CHECK(text.find("rule @0, id 1:1\n") != std::string::npos);
  CHECK(text.find("rule @0, bound in on lan0 out on wan0, id 1:2\n") != std::string::npos);
  CHECK(text.find("rule @0, bound in on lan0, id 1:3\n") != std::string::npos);
  CHECK(text.find("rule @0, bound out on wan0, id 1:4\n") != std::string::npos);
}

// A translated state shows its wire side where it differs, also where the address and port written
// one after the other read alike (10.0.0.1 port 51234, 10.0.0.15 port 1234).
TEST_CASE("pairwallctl: states show a translation whose address and port run together alike", "[ctl]") {
  pairwall::control::StateList list;
  list.set_total(1);
  list.set_matched(1);
  auto* s = list.add_states();
  s->set_proto(6);
  s->set_family(4);
  s->mutable_src()->set_address("10.0.0.1");
  s->mutable_src()->set_port(51234);
  s->mutable_wire_src()->set_address("10.0.0.15");
  s->mutable_wire_src()->set_port(1234);
  s->mutable_dst()->set_address("192.0.2.1");
  s->mutable_dst()->set_port(80);
  s->mutable_wire_dst()->set_address("192.0.2.1");
  s->mutable_wire_dst()->set_port(80);
  s->set_src_state("SYN_SENT");
  s->set_dst_state("CLOSED");
  const std::string text = pairwall::ctl::format_states(list, false);
  CHECK(text.rfind("tcp 10.0.0.1:51234 (10.0.0.15:1234) -> 192.0.2.1:80  SYN_SENT:CLOSED\n", 0) == 0);
}

TEST_CASE("pairwallctl: rules show lists scrub, then translation, then filter rules, each with its own @N",
          "[ctl]") {
  pairwall::control::RuleList rules;
  auto* scrub = rules.add_scrubs();
  scrub->set_number(0);
  scrub->set_text("scrub in all fragment reassemble");
  scrub->set_evaluations(30);
  scrub->set_packets(30);
  scrub->set_bytes(4200);
  auto* nat = rules.add_translations();
  nat->set_number(0);
  nat->set_text("nat on wan0 from 10.0.0.0/8 to any -> 192.0.2.1");
  nat->set_evaluations(7);
  nat->set_packets(12);
  nat->set_bytes(960);
  nat->set_states_current(2);
  nat->set_states_created(5);
  const std::string text = pairwall::ctl::format_rules(rules);
  // Each rule's counters follow it, as pfctl -v shows them.
  CHECK(text.find("# scrub rules, first match\n@0 scrub in all fragment reassemble\n"
                  "  [ Evaluations: 30  Packets: 30  Bytes: 4200  States: 0 (0 created) ]\n"
                  "# translation rules, first match\n@0 nat on wan0 from 10.0.0.0/8 to any -> 192.0.2.1\n"
                  "  [ Evaluations: 7  Packets: 12  Bytes: 960  States: 2 (5 created) ]\n"
                  "# filter rules, last match\n") == 0);

  pairwall::control::RuleList scrub_only;
  *scrub_only.add_scrubs() = *scrub;
  CHECK(
      pairwall::ctl::format_rules(scrub_only) ==
      "# scrub rules, first match\n@0 scrub in all fragment reassemble\n"
      "  [ Evaluations: 30  Packets: 30  Bytes: 4200  States: 0 (0 created) ]\n# filter rules, last match\n");
}

TEST_CASE("pairwallctl: a table edit says what it added, deleted and changed, as pfctl -T", "[ctl]") {
  pairwall::control::TableList edited;
  edited.set_added(2);
  edited.set_deleted(1);
  auto* t = edited.add_tables();
  t->set_name("blocked");
  t->set_count(1);
  t->add_entries("10.0.0.1/32");
  const std::string plain = pairwall::ctl::format_tables(edited, true, true);
  CHECK(plain.rfind("2 added, 1 deleted\n", 0) == 0);
  edited.set_changed(3);
  CHECK(pairwall::ctl::format_tables(edited, true, true).rfind("2 added, 1 deleted, 3 changed\n", 0) == 0);
}

TEST_CASE("pairwallctl: tables lists each table's size and what it is", "[ctl]") {
  pairwall::control::TableList listed;
  listed.set_entry_limit(200000);
  auto* shared = listed.add_tables();
  shared->set_name("bruteforce");
  shared->set_count(1);
  shared->set_shared(true);
  auto* fixed = listed.add_tables();
  fixed->set_name("lan");
  fixed->set_count(2);
  fixed->set_is_const(true);
  fixed->set_counters(true);
  CHECK(pairwall::ctl::format_tables(listed, false, false) ==
        "<bruteforce>  1 entry, shared with the peer\n"
        "<lan>  2 entries, const, counters\n"
        "3 of 200000 table entries used (set limit table-entries)\n");
}

TEST_CASE("pairwallctl: tables show -v writes each entry's counters as pfctl -T show -v", "[ctl]") {
  pairwall::control::TableList shown;
  auto* t = shown.add_tables();
  t->set_name("bad");
  t->set_count(2);
  t->set_counters(true);
  t->add_entries("10.0.0.0/8");
  t->add_entries("!10.0.0.9/32");
  auto* first = t->add_entry_stats();
  first->set_cleared_seconds_ago(30);
  first->set_in_block_packets(2);
  first->set_in_block_bytes(120);
  first->set_out_pass_packets(7);
  first->set_out_pass_bytes(9000);
  t->add_entry_stats()->set_cleared_seconds_ago(5);
  CHECK(pairwall::ctl::format_tables(shown, true, false) ==
        "   10.0.0.0/8\n"
        "\tCleared:     30 s ago\n"
        "\tIn/Block:    [ Packets: 2  Bytes: 120 ]\n"
        "\tIn/Pass:     [ Packets: 0  Bytes: 0 ]\n"
        "\tOut/Block:   [ Packets: 0  Bytes: 0 ]\n"
        "\tOut/Pass:    [ Packets: 7  Bytes: 9000 ]\n"
        "   !10.0.0.9\n"
        "\tCleared:     5 s ago\n"
        "\tIn/Block:    [ Packets: 0  Bytes: 0 ]\n"
        "\tIn/Pass:     [ Packets: 0  Bytes: 0 ]\n"
        "\tOut/Block:   [ Packets: 0  Bytes: 0 ]\n"
        "\tOut/Pass:    [ Packets: 0  Bytes: 0 ]\n");
  // Without `counters`, the time alone; and the list of tables says which count.
  t->set_counters(false);
  CHECK(pairwall::ctl::format_tables(shown, true, false) ==
        "   10.0.0.0/8\n\tCleared:     30 s ago\n   !10.0.0.9\n\tCleared:     5 s ago\n");
  t->set_counters(true);
  CHECK(pairwall::ctl::format_tables(shown, false, false) == "<bad>  2 entries, counters\n");
}

TEST_CASE("pairwallctl: tables zero says how many of the table's entries it zeroed", "[ctl]") {
  pairwall::control::TableList zeroed;
  zeroed.set_zeroed(1);
  zeroed.add_tables()->set_count(3);
  CHECK(pairwall::ctl::format_table_zero(zeroed) == "1/3 addresses zeroed\n");
}

TEST_CASE("pairwallctl: status lists what the pre-routing chain queues beyond the node", "[ctl]") {
  pairwall::control::Status status;
  status.set_node_name("fw");
  CHECK(pairwall::ctl::format_status(status).find("pre-routing") == std::string::npos);
  status.set_prerouting_hook(true);
  const std::string local_only = pairwall::ctl::format_status(status);
  CHECK(local_only.find("hooks     pre-routing for translation\n") != std::string::npos);
  status.add_prerouting_matches("inet on lan0 proto 6 to any port 80");
  status.add_prerouting_matches("inet6 on lan0 proto 6 to any port 80");
  const std::string text = pairwall::ctl::format_status(status);
  CHECK(text.find("hooks     pre-routing for translation, also queued there:\n"
                  "            inet on lan0 proto 6 to any port 80\n"
                  "            inet6 on lan0 proto 6 to any port 80\n") != std::string::npos);
}

TEST_CASE("pairwallctl: status gives each queue's length and receive buffer", "[ctl]") {
  pairwall::control::Status status;
  auto* q = status.add_queues();
  q->set_queue(3);
  q->set_packets(10);
  q->set_drops(2);
  q->set_max_len(1024);
  q->set_rcvbuf_bytes(2'097'152);
  const std::string text = pairwall::ctl::format_status(status);
  CHECK(text.find(
            "  queue 3: 10 packets, 2 dropped (queue full), 0 overruns, 0 uninspected (fail-open policy), "
            "0 verdict errors\n"
            "    holds 1024 packets, receive buffer 2.1 MB\n") != std::string::npos);
}

TEST_CASE(
    "pairwallctl: failover status names the VIPs, the watched links, the channels and the notify script",
    "[ctl]") {
  pairwall::control::FailoverStatus s;
  s.set_enabled(true);
  s.set_driver("builtin");
  s.set_role(pairwall::control::FailoverStatus::BACKUP);
  s.set_vhid(3);
  s.set_advbase_ms(200);
  s.set_advskew(100);
  s.set_demotion(64);
  s.add_demotion_reasons("tracked interface without carrier (+64)");
  s.set_master_node_id(1);
  s.set_last_heard_ms_ago(120);
  s.add_vips("lan0 10.1.0.1/24");
  s.add_vips("lan0 fd00:1::1/64");
  for (const auto& [name, carrier, tracked] :
       {std::tuple{"lan0", true, false}, std::tuple{"wan0", false, true}}) {
    auto* link = s.add_links();
    link->set_interface(name);
    link->set_carrier(carrier);
    link->set_tracked(tracked);
  }
  s.add_advertisements("lan0 (IPv4) to 224.0.0.18 port 8112");
  s.add_advertisements("lan0 (IPv6) to fe80::2 port 8112");
  s.set_notify("/etc/pairwall/notify.sh");
  const std::string text = pairwall::ctl::format_failover(s);
  CHECK(text.find("advertising   lan0 (IPv4) to 224.0.0.18 port 8112\n"
                  "              lan0 (IPv6) to fe80::2 port 8112\n") != std::string::npos);
  CHECK(text.find("vips          not held: lan0 10.1.0.1/24, lan0 fd00:1::1/64\n") != std::string::npos);
  CHECK(text.find("links         lan0 carrier, wan0 no carrier (tracked)\n") != std::string::npos);
  CHECK(text.find("notify        /etc/pairwall/notify.sh\n") != std::string::npos);
  s.set_vips_held(true);
  s.clear_notify();
  const std::string held = pairwall::ctl::format_failover(s);
  CHECK(held.find("vips          held: lan0") != std::string::npos);
  CHECK(held.find("notify") == std::string::npos);
}
