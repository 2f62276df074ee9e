// pairwall-failoverd: runs one failover group (failover::FailoverService) without the packet
// engine or sync, so the election, the VIP moves and the announcements can be tested with real
// processes in network namespaces before, and apart from, pairwalld.
//
//   pairwall-failoverd -c FILE [-s SOCKET] [--bulk-pending] [--engine-bad]
//       FILE holds [node] id = N and a [failover] section (failover/failover_config.h).
//       SOCKET (default /run/pairwall/failoverd.sock) takes one command per line and answers one
//       line, "ok ..." or "error ...":
//         status                    JSON: role, demotion, transitions, counters
//         demote N | promote N      administrative demotion
//         set-role master|backup|fault   (driver "keepalived")
//         health                    ok while not demoted
//         bulk pending | bulk done  what the sync service would report
//         engine bad | engine ok    what the engine would report
//       A leading "failover" word is accepted, so it answers what pairwallctl would be asked.
//   pairwall-failoverd --ctl SOCKET WORDS...
//       sends WORDS as one command, prints the answer, exits 0 on "ok", 1 otherwise.
// SIGTERM / SIGINT stop the group cleanly (leaving advertisement, VIPs released).
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "failover/failover_service.h"

namespace pf = pairwall::failover;
namespace asio = boost::asio;
using Local = asio::local::stream_protocol;

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string status_json(const pf::FailoverSnapshot& s) {
  std::ostringstream o;
  o << "{\"node_id\":" << s.node_id << ",\"driver\":\""
    << (s.driver == pf::Driver::Builtin ? "builtin" : "keepalived") << "\",\"role\":\""
    << pf::role_name(s.role) << "\",\"vhid\":" << int{s.vhid} << ",\"advbase_ms\":" << s.advbase_ms
    << ",\"advskew\":" << int{s.advskew} << ",\"preempt\":" << (s.preempt ? "true" : "false")
    << ",\"demotion\":" << s.demotion << ",\"demotion_reasons\":[";
  for (std::size_t i = 0; i < s.demotion_reasons.size(); ++i)
    o << (i ? "," : "") << json_string(s.demotion_reasons[i]);
  o << "],\"now_us\":" << s.now.count() << ",\"last_heard_ms_ago\":" << s.last_heard_ms_ago
    << ",\"master_node_id\":" << s.master_node_id << ",\"vips_held\":" << (s.vips_held ? "true" : "false")
    << ",\"vips\":[";
  for (std::size_t i = 0; i < s.vips.size(); ++i) o << (i ? "," : "") << json_string(s.vips[i]);
  o << "],\"links\":{";
  for (std::size_t i = 0; i < s.links.size(); ++i) {
    o << (i ? "," : "") << json_string(s.links[i].name) << ":" << (s.links[i].carrier ? "true" : "false");
  }
  o << "},\"transitions\":[";
  for (std::size_t i = 0; i < s.transitions.size(); ++i) {
    const auto& t = s.transitions[i];
    o << (i ? "," : "") << "{\"at_us\":" << t.at.count() << ",\"unix_ms\":" << t.unix_ms << ",\"from\":\""
      << pf::role_name(t.from) << "\",\"to\":\"" << pf::role_name(t.to)
      << "\",\"cause\":" << json_string(t.cause) << ",\"peer\":" << t.peer << "}";
  }
  o << "],\"rejects\":{";
  for (std::size_t i = 0; i < pf::kRejectCount; ++i) {
    o << (i ? "," : "") << "\"" << pf::reject_name(static_cast<pf::Reject>(i)) << "\":" << s.rejects[i];
  }
  const auto& c = s.counters;
  o << "},\"counters\":{\"adverts_sent\":" << c.adverts_sent
    << ",\"advert_send_errors\":" << c.advert_send_errors << ",\"adverts_accepted\":" << c.adverts_accepted
    << ",\"announcements\":" << c.announcements << ",\"announce_errors\":" << c.announce_errors
    << ",\"vip_renewals\":" << c.vip_renewals << ",\"vip_retries\":" << c.vip_retries
    << ",\"vip_errors\":" << c.vip_errors << ",\"worse_masters\":" << c.worse_masters
    << ",\"node_id_conflicts\":" << c.node_id_conflicts
    << ",\"advert_socket_retries\":" << c.advert_socket_retries << ",\"notify_runs\":" << c.notify_runs
    << ",\"notify_failures\":" << c.notify_failures << "}}";
  return o.str();
}

struct Inputs {
  std::atomic<bool> bulk_done{true};
  std::atomic<bool> engine_ok{true};
};

std::string run_command(pf::FailoverService& svc, Inputs& in, std::string line) {
  std::istringstream words(line);
  std::vector<std::string> w;
  for (std::string x; words >> x;) w.push_back(x);
  if (!w.empty() && w[0] == "failover") w.erase(w.begin());
  if (w.empty()) return "error empty command";
  auto amount = [&](uint32_t& n) {
    if (w.size() != 2) return false;
    try {
      n = static_cast<uint32_t>(std::stoul(w[1]));
      return true;
    } catch (...) {
      return false;
    }
  };
  const std::string& cmd = w[0];
  if (cmd == "status") return "ok " + status_json(svc.snapshot());
  if (cmd == "demote" || cmd == "promote") {
    uint32_t n = 0;
    if (!amount(n)) return "error usage: " + cmd + " N";
    const std::string err = cmd == "demote" ? svc.demote(n) : svc.promote(n);
    return err.empty() ? "ok" : "error " + err;
  }
  if (cmd == "set-role" && w.size() == 2) {
    pf::Role r;
    if (w[1] == "master") {
      r = pf::Role::Master;
    } else if (w[1] == "backup") {
      r = pf::Role::Backup;
    } else if (w[1] == "fault") {
      r = pf::Role::Fault;
    } else {
      return "error usage: set-role master|backup|fault";
    }
    const std::string err = svc.set_external_role(r);
    return err.empty() ? "ok" : "error " + err;
  }
  if (cmd == "health") {
    const auto h = svc.healthy();
    return h.healthy ? "ok healthy" : "error " + h.reason;
  }
  if (cmd == "bulk" && w.size() == 2 && (w[1] == "done" || w[1] == "pending")) {
    in.bulk_done = w[1] == "done";
    return "ok";
  }
  if (cmd == "engine" && w.size() == 2 && (w[1] == "ok" || w[1] == "bad")) {
    in.engine_ok = w[1] == "ok";
    return "ok";
  }
  return "error unknown command: " + line;
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Local::socket s, pf::FailoverService& svc, Inputs& in)
      : socket_(std::move(s)), svc_(svc), in_(in) {}
  void read() {
    asio::async_read_until(socket_, buf_, '\n',
                           [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                             if (ec) return;
                             std::istream is(&self->buf_);
                             std::string line;
                             std::getline(is, line);
                             self->reply_ = run_command(self->svc_, self->in_, line) + "\n";
                             asio::async_write(self->socket_, asio::buffer(self->reply_),
                                               [self](boost::system::error_code wec, std::size_t) {
                                                 if (!wec) self->read();
                                               });
                           });
  }

 private:
  Local::socket socket_;
  pf::FailoverService& svc_;
  Inputs& in_;
  asio::streambuf buf_;
  std::string reply_;
};

void accept(Local::acceptor& acc, pf::FailoverService& svc, Inputs& in) {
  acc.async_accept([&](boost::system::error_code ec, Local::socket s) {
    if (ec) return;
    std::make_shared<Session>(std::move(s), svc, in)->read();
    accept(acc, svc, in);
  });
}

int client(const std::string& path, int argc, char** argv, int first) {
  std::string line;
  for (int i = first; i < argc; ++i) line += (line.empty() ? "" : " ") + std::string(argv[i]);
  try {
    asio::io_context io;
    Local::socket s(io);
    s.connect(Local::endpoint(path));
    line += "\n";
    asio::write(s, asio::buffer(line));
    asio::streambuf buf;
    asio::read_until(s, buf, '\n');
    std::istream is(&buf);
    std::string reply;
    std::getline(is, reply);
    const bool ok = reply.rfind("ok", 0) == 0;
    std::string text = reply.substr(std::min<std::size_t>(reply.size(), ok ? 3 : 6));
    (ok ? std::cout : std::cerr) << (ok ? text : "pairwall-failoverd: " + text) << (text.empty() ? "" : "\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "pairwall-failoverd: " << path << ": " << e.what() << "\n";
    return 2;
  }
}

int usage() {
  std::cerr << "usage: pairwall-failoverd -c FILE [-s SOCKET] [--bulk-pending] [--engine-bad]\n"
               "       pairwall-failoverd --ctl SOCKET COMMAND...\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path, socket_path = "/run/pairwall/failoverd.sock";
  Inputs inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ctl" && i + 1 < argc) return client(argv[i + 1], argc, argv, i + 2);
    if (a == "-c" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (a == "-s" && i + 1 < argc) {
      socket_path = argv[++i];
    } else if (a == "--bulk-pending") {
      inputs.bulk_done = false;
    } else if (a == "--engine-bad") {
      inputs.engine_ok = false;
    } else {
      return usage();
    }
  }
  if (config_path.empty()) return usage();
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");

  pf::FailoverConfig config;
  uint32_t node_id = 0;
  try {
    const toml::table root = toml::parse_file(config_path);
    const auto id = root["node"]["id"].value_exact<int64_t>();
    if (!id || *id < 1 || *id > UINT32_MAX) {
      throw pairwall::ConfigError(config_path + ": [node] id: expected 1..4294967295");
    }
    node_id = static_cast<uint32_t>(*id);
    const toml::table* section = root["failover"].as_table();
    if (!section) throw pairwall::ConfigError(config_path + ": [failover]: missing");
    config = pf::parse_failover_config(*section, config_path);
  } catch (const toml::parse_error& e) {
    std::cerr << config_path << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
              << e.description() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }

  asio::io_context io;
  pf::FailoverHooks hooks;
  hooks.bulk_sync_complete = [&] { return inputs.bulk_done.load(); };
  hooks.engine_healthy = [&] { return inputs.engine_ok.load(); };
  pf::FailoverService service(io, config, node_id, hooks);
  try {
    service.start();
  } catch (const std::exception& e) {
    std::cerr << "pairwall-failoverd: " << e.what() << "\n";
    return 1;
  }

  std::filesystem::create_directories(std::filesystem::path(socket_path).parent_path());
  ::unlink(socket_path.c_str());
  Local::acceptor acceptor(io, Local::endpoint(socket_path));
  accept(acceptor, service, inputs);

  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code, int sig) {
    spdlog::info("pairwall-failoverd: signal {}, leaving", sig);
    service.stop();
    acceptor.close();
    io.stop();
  });
  io.run();
  ::unlink(socket_path.c_str());
  return 0;
}
