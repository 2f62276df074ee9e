#include "daemon/sync/sync_service.h"

#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <stdexcept>
#include <tuple>

#include "daemon/control/boot_epoch.h"

namespace pairwall::sync {
namespace {

namespace asio = boost::asio;
using udp = asio::ip::udp;

constexpr Micros kDrainPeriod{2'000};   // how long a local change may sit in a worker's ring
constexpr Micros kStatusPeriod{5'000};  // how stale the status the control thread reads may be
constexpr std::size_t kMaxRingMarks = 4096;
constexpr Micros kDropLogPeriod{10'000'000};
constexpr Micros kOneWayGrace{300'000};
constexpr int kSocketBuffer = 4 << 20;
constexpr int kDscpCs6 = 0xc0;  // RFC 4594: network control
constexpr std::size_t kReceiveBatch = 256;
constexpr std::chrono::milliseconds kStopFlushWait{200};  // the most a stop waits for its last flush
constexpr Micros kInterfaceCheckPeriod{1'000'000};        // how often the sync interface's index is read

constexpr std::chrono::seconds kMoveWait{2};  // the most a reload waits for the sync thread to move the link

// [sync]'s settings of the link itself, which a reload may change (SyncService::move_link). Field
// by field, never the whole struct: the control thread writes [sync] defer's fields meanwhile.
template <typename Config>
auto link_of(Config& c) {
  return std::tie(c.interface, c.address, c.peer, c.group, c.ipv6, c.port, c.ttl_security);
}

bool same_link(const SyncConfig& a, const SyncConfig& b) {
  return link_of(a) == link_of(b);
}

void copy_link(const SyncConfig& from, SyncConfig& to) {
  link_of(to) = link_of(from);
}

std::string peer_text(const SyncConfig& c) {
  return c.peer.empty() ? c.group : c.peer;
}

// "sync0 -> 192.168.255.2 port 8370", for the log and the reload's answer.
std::string link_text(const SyncConfig& c) {
  return c.interface + " -> " + peer_text(c) + " port " + std::to_string(c.port) +
         (c.ttl_security ? "" : " (ttl_security off)");
}

// Room for everything a peer whose resend_window is at most twice this node's may have in flight;
// one with a larger window sees what it sends past this one dropped and resent (beyond_window).
std::size_t receive_window(const SyncConfig& c) {
  return std::max<std::size_t>(8192, 2 * std::size_t{c.resend_window});
}

// The UDP payload a datagram may fill: the link's MTU less the family's IP header and UDP's.
std::size_t datagram_bytes(const SyncConfig& c) {
  return c.mtu - (c.ipv6 ? 40 : 20) - 8;
}

Micros steady_now() {
  return std::chrono::duration_cast<Micros>(std::chrono::steady_clock::now().time_since_epoch());
}

void set_int(int fd, int level, int name, int value, const char* what, const std::string& context,
             bool required) {
  if (::setsockopt(fd, level, name, &value, sizeof value) != 0 && required) {
    throw std::runtime_error(context + ": " + what + ": " + std::strerror(errno));
  }
}

// The IPv4 TTL or IPv6 hop limit recvmsg reported in `msg`'s control messages (IP_RECVTTL,
// IPV6_RECVHOPLIMIT); -1 when it reported none.
int received_ttl(msghdr& msg) noexcept {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    const bool ttl = (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) ||
                     (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT);
    if (ttl && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int value = -1;
      std::memcpy(&value, CMSG_DATA(c), sizeof value);
      return value;
    }
  }
  return -1;
}

control::SyncStatus::PeerState peer_state_value(const ProtocolStatus& s) {
  if (!s.peer_heard) return control::SyncStatus::UNKNOWN;
  switch (s.peer_state) {
    case PeerState::Up:
      return control::SyncStatus::UP;
    case PeerState::OneWay:
      return control::SyncStatus::ONE_WAY;
    case PeerState::Down:
      return control::SyncStatus::DOWN;
  }
  return control::SyncStatus::UNKNOWN;
}

// Whether both rule set digests are known: this node has rules, and a peer that is up has told
// its own (a peer gone quiet is not compared on what it said last).
bool rules_known(const ProtocolStatus& s) {
  return s.rules_digest != 0 && s.peer_rules_digest != 0 && s.peer_state == PeerState::Up;
}

control::SyncStatus::BulkState bulk_state_value(BulkState s) {
  switch (s) {
    case BulkState::Idle:
      return control::SyncStatus::NONE;
    case BulkState::Requested:
      return control::SyncStatus::REQUESTED;
    case BulkState::Receiving:
      return control::SyncStatus::RECEIVING;
    case BulkState::Done:
      return control::SyncStatus::DONE;
    case BulkState::TimedOut:
      return control::SyncStatus::TIMED_OUT;
  }
  return control::SyncStatus::NONE;
}

}  // namespace

SyncService::SyncService(engine::Engine& engine, SyncConfig config, uint32_t node_id, uint64_t epoch)
    : config_(std::move(config)),
      node_id_(node_id),
      epoch_(epoch),
      store_(engine),
      socket_(io_),
      timer_(io_),
      kick_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      kick_(io_),
      rx_buffer_(65536) {
  if (kick_fd_ < 0) throw std::runtime_error(std::string("sync: eventfd: ") + std::strerror(errno));
}

SyncService::~SyncService() {
  stop();
  if (kick_fd_ >= 0) ::close(kick_fd_);
}

void SyncService::add_ring(engine::SpscRing<engine::StateRecord>& ring, SyncedFn on_synced) {
  rings_.push_back(Ring{&ring, std::move(on_synced), {}, 0, 0, false, false});
}

void SyncService::kick() noexcept {
  const uint64_t one = 1;
  if (kick_fd_ >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(kick_fd_, &one, sizeof one);
  }
}

void SyncService::arm_kick() {
  kick_.async_read_some(asio::buffer(&kick_count_, sizeof kick_count_),
                        [this](const boost::system::error_code& ec, std::size_t) {
                          if (ec) return;
                          pump();
                          arm_kick();
                        });
}

void SyncService::open_socket() {
  const std::string context = "[sync] interface \"" + config_.interface + "\"";
  const std::string& target_text = config_.peer.empty() ? config_.group : config_.peer;
  const auto target = asio::ip::make_address(target_text);
  const bool v6 = target.is_v6();
  const bool multicast = target.is_multicast();
  const unsigned ifindex = ::if_nametoindex(config_.interface.c_str());
  if (ifindex == 0) throw std::runtime_error(context + ": no such interface on this node");

  socket_.open(v6 ? udp::v6() : udp::v4());
  const int fd = socket_.native_handle();
  if (::setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, config_.interface.c_str(),
                   static_cast<socklen_t>(config_.interface.size())) != 0) {
    throw std::runtime_error(context + ": cannot bind the sync socket to it (SO_BINDTODEVICE): " +
                             std::strerror(errno) + (errno == EPERM ? " (needs CAP_NET_RAW)" : ""));
  }
  // No SO_REUSEADDR: Linux hands a unicast datagram to one of the sockets that share an address
  // and port, the one bound last, so that a second daemon on the node would take the peer's
  // datagrams from this one without a word. Refused its bind, it says so at its start.
  if (v6) set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1, "IPV6_V6ONLY", context, true);
  // Bulk transfers arrive in bursts: a root process may exceed net.core.rmem_max.
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &kSocketBuffer, sizeof kSocketBuffer) != 0) {
    set_int(fd, SOL_SOCKET, SO_RCVBUF, kSocketBuffer, "SO_RCVBUF", context, false);
  }
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &kSocketBuffer, sizeof kSocketBuffer) != 0) {
    set_int(fd, SOL_SOCKET, SO_SNDBUF, kSocketBuffer, "SO_SNDBUF", context, false);
  }
  if (v6) {
    set_int(fd, IPPROTO_IPV6, IPV6_TCLASS, kDscpCs6, "IPV6_TCLASS", context, false);
    set_int(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1, "IPV6_RECVHOPLIMIT", context, true);
  } else {
    set_int(fd, IPPROTO_IP, IP_TOS, kDscpCs6, "IP_TOS", context, false);
    set_int(fd, IPPROTO_IP, IP_RECVTTL, 1, "IP_RECVTTL", context, true);
  }
  // RFC 5082: 255, which no router passes on unchanged, so that the peer can tell our datagrams
  // from any that crossed one. Without ttl_security the system's defaults stand: 64 (or the
  // route's) to a peer, 1 to a group.
  if (config_.ttl_security) {
    if (v6) {
      set_int(fd, IPPROTO_IPV6, IPV6_UNICAST_HOPS, kLinkTtl, "IPV6_UNICAST_HOPS", context, true);
      set_int(fd, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, kLinkTtl, "IPV6_MULTICAST_HOPS", context, true);
    } else {
      set_int(fd, IPPROTO_IP, IP_TTL, kLinkTtl, "IP_TTL", context, true);
      set_int(fd, IPPROTO_IP, IP_MULTICAST_TTL, kLinkTtl, "IP_MULTICAST_TTL", context, true);
    }
  }
  // Linux delivers a datagram for any group a socket of the host joined to every socket bound to
  // the wildcard address and the port, unless it turns this off: our group's datagrams only.
  // IPV6_MULTICAST_ALL came with Linux 4.20; an older kernel delivers them regardless, and the
  // tag check turns them away.
  if (v6) {
#ifdef IPV6_MULTICAST_ALL
    set_int(fd, IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0, "IPV6_MULTICAST_ALL", context, false);
#endif
  } else {
    set_int(fd, IPPROTO_IP, IP_MULTICAST_ALL, 0, "IP_MULTICAST_ALL", context, true);
  }

  asio::ip::address local =
      v6 ? asio::ip::address(asio::ip::address_v6::any()) : asio::ip::address(asio::ip::address_v4::any());
  if (!config_.address.empty() && !multicast) local = asio::ip::make_address(config_.address);
  if (local.is_v6() && local.to_v6().is_link_local()) {
    auto a = local.to_v6();
    a.scope_id(ifindex);
    local = a;
  }
  boost::system::error_code ec;
  socket_.bind(udp::endpoint(local, config_.port), ec);
  if (ec) {
    throw std::runtime_error("[sync] address " + local.to_string() + " port " + std::to_string(config_.port) +
                             ": cannot bind: " + ec.message());
  }

  if (multicast) {
    // The group on the sync interface only, and not our own datagrams back.
    if (v6) {
      ipv6_mreq mreq{};
      const auto bytes = target.to_v6().to_bytes();
      std::memcpy(&mreq.ipv6mr_multiaddr, bytes.data(), bytes.size());
      mreq.ipv6mr_interface = ifindex;
      if (::setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &mreq, sizeof mreq) != 0) {
        throw std::runtime_error(context + ": cannot join group " + target_text + ": " +
                                 std::strerror(errno));
      }
      set_int(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, static_cast<int>(ifindex), "IPV6_MULTICAST_IF", context,
              true);
      set_int(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, 0, "IPV6_MULTICAST_LOOP", context, true);
    } else {
      ip_mreqn mreq{};
      mreq.imr_multiaddr.s_addr = htonl(target.to_v4().to_uint());
      mreq.imr_ifindex = static_cast<int>(ifindex);
      if (::setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof mreq) != 0) {
        throw std::runtime_error(context + ": cannot join group " + target_text + ": " +
                                 std::strerror(errno));
      }
      if (::setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &mreq, sizeof mreq) != 0) {
        throw std::runtime_error(context + ": IP_MULTICAST_IF: " + std::strerror(errno));
      }
      set_int(fd, IPPROTO_IP, IP_MULTICAST_LOOP, 0, "IP_MULTICAST_LOOP", context, true);
    }
  }

  asio::ip::address dest = target;
  if (dest.is_v6() && (dest.to_v6().is_link_local() || dest.to_v6().is_multicast_link_local())) {
    auto a = dest.to_v6();
    a.scope_id(ifindex);
    dest = a;
  }
  destination_ = udp::endpoint(dest, config_.port);
  socket_.non_blocking(true);
  ifindex_ = ifindex;
}

void SyncService::follow_interface(Micros now) {
  if (now < next_interface_check_) return;
  next_interface_check_ = now + kInterfaceCheckPeriod;
  const unsigned ifindex = ::if_nametoindex(config_.interface.c_str());
  if (ifindex == 0) {
    if (!interface_missing_logged_) {
      spdlog::warn("sync: interface {} is gone: nothing is sent or heard until it is back",
                   config_.interface);
      interface_missing_logged_ = true;
    }
    return;
  }
  interface_missing_logged_ = false;
  if (ifindex == ifindex_) return;
  // Closing cancels the wait for a datagram (on_readable() sees operation_aborted and stops).
  boost::system::error_code ignored;
  socket_.close(ignored);
  ifindex_ = 0;
  try {
    open_socket();
  } catch (const std::exception& e) {
    // Said once per index: an address not yet on the new interface fails every second until it is.
    if (reopen_failed_index_ != ifindex) {
      spdlog::error(
          "sync: interface {} is back (index {}) but the socket cannot follow it yet, tried "
          "again every {} s: {}",
          config_.interface, ifindex, kInterfaceCheckPeriod.count() / 1'000'000, e.what());
      reopen_failed_index_ = ifindex;
    }
    socket_.close(ignored);
    return;
  }
  reopen_failed_index_ = 0;
  socket_reopens_.fetch_add(1, std::memory_order_relaxed);
  spdlog::info("sync: interface {} has a new index ({}): the socket is opened on it again", config_.interface,
               ifindex);
  arm_receive();
}

void SyncService::start() {
  if (running_) return;
  open_socket();
  {
    std::lock_guard lock(status_mutex_);
    peer_text_ = peer_text(config_);
    link_interface_ = config_.interface;
  }

  ProtocolConfig pc;
  pc.node_id = node_id_;
  pc.peer_node_id = config_.peer_node_id;
  // Larger at every restart, which is what the peer's stale-epoch check needs.
  pc.epoch = epoch_ ? epoch_ : control::wall_clock_us();
  pc.max_datagram = datagram_bytes(config_);
  pc.flush_interval = std::chrono::duration_cast<Micros>(config_.flush_interval);
  pc.bulk_timeout_min = std::chrono::duration_cast<Micros>(config_.bulk_timeout_min);
  pc.send.capacity = config_.resend_window;
  pc.pending_limit = config_.pending_limit;
  pc.ack_inserts_at_once = config_.defer;
  pc.ttl_security = config_.ttl_security;
  pc.receive_window = receive_window(config_);
  protocol_ = std::make_unique<SyncProtocol>(pc, config_.key, store_, steady_now(), config_.accept_key);
  protocol_->on_peer_table(peer_table_);
  {
    std::lock_guard lock(status_mutex_);
    status_ = protocol_->status(steady_now());
    logged_ = status_;
  }

  spdlog::info("sync: node {} epoch {} on {} ({}:{} -> {}), datagrams up to {} bytes, flush {} ms", node_id_,
               pc.epoch, config_.interface, socket_.local_endpoint().address().to_string(), config_.port,
               destination_.address().to_string(), pc.max_datagram, config_.flush_interval.count());
  kick_.assign(kick_fd_);
  running_ = true;
  arm_receive();
  arm_kick();
  asio::post(io_, [this] { pump(); });
  thread_ = std::thread([this] {
    // Named, as the queue workers are, so that ps, top and a hung thread's report say which.
    pthread_setname_np(pthread_self(), "pw-sync");
    io_.run();
  });
}

void SyncService::set_keys(std::vector<uint8_t> key, std::vector<uint8_t> accept_key) {
  if (!running_) {
    config_.key = std::move(key);
    config_.accept_key = std::move(accept_key);
    return;
  }
  asio::post(io_, [this, key = std::move(key), accept_key = std::move(accept_key)] {
    try {
      protocol_->set_keys(key, accept_key);
    } catch (const std::exception& e) {
      spdlog::error("sync: the running keys kept: {}", e.what());
    }
  });
}

std::string SyncService::move_link(const SyncConfig& next) {
  if (!running_) {
    copy_link(next, config_);
    return {};
  }
  auto answer = std::make_shared<std::promise<std::string>>();
  std::future<std::string> moved = answer->get_future();
  asio::post(io_, [this, next, answer] { answer->set_value(take_link(next)); });
  if (moved.wait_for(kMoveWait) != std::future_status::ready) {
    return "[sync] link: the sync thread did not answer within " + std::to_string(kMoveWait.count()) +
           " s; it takes the new settings when it does (see the log), and the hooks follow";
  }
  return moved.get();
}

std::string SyncService::take_link(const SyncConfig& next) {
  if (same_link(config_, next)) return {};
  const std::string from = link_text(config_);
  SyncConfig before;
  copy_link(config_, before);
  // Closing cancels the wait for a datagram (on_readable() sees operation_aborted and stops). The
  // old socket goes first: the new one may want its address and port.
  boost::system::error_code ignored;
  socket_.close(ignored);
  ifindex_ = 0;
  copy_link(next, config_);
  std::string refused;
  try {
    open_socket();
  } catch (const std::exception& e) {
    refused = "[sync] link not moved to " + link_text(next) + ": " + e.what() + "; it stays " + from;
    socket_.close(ignored);
    copy_link(before, config_);
    try {
      open_socket();
    } catch (const std::exception& again) {
      // follow_interface() opens it again once it can, as for an interface made anew.
      spdlog::error("sync: the link {} cannot be opened again either, tried again every {} s: {}", from,
                    kInterfaceCheckPeriod.count() / 1'000'000, again.what());
      socket_.close(ignored);
    }
  }
  if (socket_.is_open()) arm_receive();
  if (refused.empty()) {
    protocol_->set_ttl_security(config_.ttl_security);
    protocol_->set_max_datagram(datagram_bytes(config_));  // another family's headers
    {
      std::lock_guard lock(status_mutex_);
      peer_text_ = peer_text(config_);
      link_interface_ = config_.interface;
    }
    spdlog::info("sync: link {} moved to {} (local {})", from, link_text(config_),
                 socket_.local_endpoint(ignored).address().to_string());
  } else {
    spdlog::error("sync: {}", refused);
  }
  pump();
  return refused;
}

void SyncService::retune(const SyncConfig& next) {
  const SyncProtocol::Tuning tuning{std::chrono::duration_cast<Micros>(next.flush_interval),
                                    std::chrono::duration_cast<Micros>(next.bulk_timeout_min),
                                    next.pending_limit,
                                    next.peer_node_id,
                                    next.resend_window,
                                    receive_window(next)};
  if (!running_) {
    config_.flush_interval = next.flush_interval;
    config_.bulk_timeout_min = next.bulk_timeout_min;
    config_.pending_limit = next.pending_limit;
    config_.peer_node_id = next.peer_node_id;
    config_.resend_window = next.resend_window;
    config_.mtu = next.mtu;
    return;
  }
  asio::post(io_, [this, tuning, mtu = next.mtu] {
    protocol_->retune(tuning);
    if (mtu == config_.mtu) return;
    config_.mtu = mtu;
    protocol_->set_max_datagram(datagram_bytes(config_));
    spdlog::info("sync: mtu {}: datagrams up to {} bytes", mtu, protocol_->max_datagram());
  });
}

void SyncService::set_defer(bool enabled, std::chrono::milliseconds timeout) {
  config_.defer = enabled;
  config_.defer_timeout = timeout;
  if (running_) asio::post(io_, [this, enabled] { protocol_->set_ack_inserts_at_once(enabled); });
}

void SyncService::share_table(const std::string& name, std::vector<engine::AgedTableEntry> entries) {
  if (!running_) return;
  asio::post(io_, [this, table = SharedTable{name, std::move(entries)}]() mutable {
    protocol_->share_table(std::move(table), steady_now());
    pump();
  });
}

std::string SyncService::request_resync() {
  if (!running_) return "sync is not running";
  asio::post(io_, [this] {
    protocol_->request_bulk(steady_now());
    spdlog::info("sync: the peer's whole table asked for (pairwallctl sync resync)");
    pump();
  });
  return {};
}

void SyncService::stop() {
  if (!running_) return;
  running_ = false;
  // The workers' last records (their queues stop first) and those that wait for their flush go
  // out before the socket closes: a node stopped on purpose hands its group to the peer, which
  // should then hold its newest connections too. Bounded: a stop never waits on a stuck loop.
  auto flushed = std::make_shared<std::promise<void>>();
  asio::post(io_, [this, flushed] {
    pump();
    protocol_->flush(steady_now(), [this](std::span<const uint8_t> d) { return send(d); });
    flushed->set_value();
  });
  flushed->get_future().wait_for(kStopFlushWait);
  io_.stop();
  if (thread_.joinable()) thread_.join();
  boost::system::error_code ec;
  socket_.close(ec);
  // The eventfd stays open until destruction: workers may still kick.
  kick_.release();
}

void SyncService::arm_receive() {
  socket_.async_wait(udp::socket::wait_read,
                     [this](const boost::system::error_code& ec) { on_readable(ec); });
}

void SyncService::on_readable(const boost::system::error_code& ec) {
  if (ec == asio::error::operation_aborted) return;
  const Micros now = steady_now();
  // Whatever is queued, without going back to the loop for each; bounded, so that a flood cannot
  // keep the timers and the kicks waiting (the next wait finds the rest at once).
  for (std::size_t i = 0; i < kReceiveBatch; ++i) {
    int ttl = -1;
    const ssize_t n = receive_one(ttl);
    if (n < 0) break;
    protocol_->receive(std::span<const uint8_t>(rx_buffer_.data(), static_cast<std::size_t>(n)), ttl, now);
  }
  pump();
  arm_receive();
}

ssize_t SyncService::receive_one(int& ttl) noexcept {
  iovec iov{rx_buffer_.data(), rx_buffer_.size()};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int)) * 2> control;
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  const ssize_t n = ::recvmsg(socket_.native_handle(), &msg, MSG_DONTWAIT);
  if (n >= 0) ttl = received_ttl(msg);
  return n;
}

bool SyncService::send(std::span<const uint8_t> datagram) noexcept {
  boost::system::error_code ec;
  socket_.send_to(asio::buffer(datagram.data(), datagram.size()), destination_, 0, ec);
  if (ec) last_send_error_ = ec;
  return !ec;
}

void SyncService::pump() {
  const Micros now = steady_now();
  // A state's insert is pushed while its shard's lock is held, so a kill or flush that removes
  // the state (the control ring's delete or clear) is pushed after it. Drained whole, one ring
  // after another, a delete pushed just after the pump left the workers' rings would go out
  // before its insert, and the peer keep the state for good. So each ring is taken only as far as
  // it was filled when the pump began, those fills read from the last ring to the first: every
  // insert that a delete counted here follows was pushed before that fill was read, and the
  // earlier ring's fill, read after it, counts it too.
  for (auto r = rings_.rbegin(); r != rings_.rend(); ++r) r->drain_to = r->ring->published();
  engine::StateRecord record;
  for (Ring& r : rings_) {
    const uint64_t popped_before = r.ring->consumed();
    while (r.ring->consumed() < r.drain_to && r.ring->pop(record)) protocol_->enqueue(record, now);
    if (r.on_synced && r.ring->consumed() != popped_before) {
      if (r.marks.size() == kMaxRingMarks) r.marks.pop_front();  // the later marks cover it
      r.marks.emplace_back(r.ring->consumed(), protocol_->enqueued());
    }
  }
  // conntrackd's netlink path loses events under load and nobody notices until a failover; a
  // change our rings dropped is made good by a full resync instead.
  if (events_lost_) {
    const uint64_t lost = events_lost_();
    if (lost > events_lost_seen_) {
      events_lost_seen_ = lost;
      protocol_->local_changes_lost();
    }
  }
  follow_interface(now);
  protocol_->poll(now, [this](std::span<const uint8_t> d) { return send(d); });
  report_synced(now);

  // The status the control thread reads is refreshed before bulk_done() turns true, so that
  // both never disagree.
  const bool bulk_just_done = !bulk_done_.load(std::memory_order_relaxed) && protocol_->bulk_done();
  if (bulk_just_done || now - last_status_ >= kStatusPeriod) {
    last_status_ = now;
    ProtocolStatus s = protocol_->status(now);
    log_changes(s, now);
    std::lock_guard lock(status_mutex_);
    status_ = std::move(s);
    status_time_ = now;
  }
  if (bulk_just_done) {
    bulk_done_.store(true, std::memory_order_release);
    if (bulk_done_callback_) bulk_done_callback_();
  }
  arm_timer(now);
}

void SyncService::report_synced(Micros now) {
  const bool peer_up = protocol_->peer_state(now) == PeerState::Up;
  const uint64_t synced = protocol_->synced();
  for (Ring& r : rings_) {
    if (!r.on_synced) continue;
    uint64_t ring_synced = r.synced;
    while (!r.marks.empty() && r.marks.front().second <= synced) {
      ring_synced = r.marks.front().first;
      r.marks.pop_front();
    }
    if (!peer_up) {
      // Nothing will be acked: what waits is let go, and the marks start again.
      r.marks.clear();
      ring_synced = r.ring->consumed();
    }
    if (r.reported && ring_synced == r.synced && peer_up == r.peer_up) continue;
    r.synced = ring_synced;
    r.peer_up = peer_up;
    r.reported = true;
    r.on_synced(ring_synced, peer_up);
  }
}

void SyncService::arm_timer(Micros now) {
  const Micros deadline = std::min(protocol_->next_deadline(now), now + kDrainPeriod);
  timer_.expires_at(std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(deadline)));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) pump();
  });
}

uint64_t SyncService::ThrottledCount::due(uint64_t count, Micros now) {
  if (count <= logged || now - last < kDropLogPeriod) return 0;
  const uint64_t gained = count - logged;
  logged = count;
  last = now;
  return gained;
}

void SyncService::log_changes(const ProtocolStatus& s, Micros now) {
  const ProtocolStatus& o = logged_;
  const auto& c = s.counters;
  const auto& oc = o.counters;
  // A one-way link is reported once it lasts: for a moment after a start or a link coming back,
  // one side hears the other before its keepalive says so.
  if (s.peer_state != o.peer_state) peer_state_since_ = now;
  const bool settled = s.peer_state != PeerState::OneWay || now - peer_state_since_ >= kOneWayGrace;
  if (s.peer_state != logged_peer_state_ && settled) {
    logged_peer_state_ = s.peer_state;
    switch (s.peer_state) {
      case PeerState::Up:
        spdlog::info("sync: peer node {} up (epoch {})", s.peer_node_id, s.peer_epoch);
        break;
      case PeerState::OneWay:
        spdlog::warn("sync: peer node {} is heard but does not hear this node (one-way link)",
                     s.peer_node_id);
        break;
      case PeerState::Down:
        spdlog::warn("sync: peer node {} silent for {} ms: down", s.peer_node_id,
                     std::chrono::duration_cast<std::chrono::milliseconds>(s.last_heard_age).count());
        break;
    }
  }
  // Told once per change, not with every keepalive.
  const bool rules_differ = rules_known(s) && s.rules_digest != s.peer_rules_digest;
  if (rules_known(s) && (rules_differ != logged_rules_differ_ || s.rules_digest != o.rules_digest ||
                         s.peer_rules_digest != o.peer_rules_digest)) {
    if (rules_differ) {
      spdlog::warn(
          "sync: peer node {} runs other rules than this node (digest {:016x}, here {:016x}): after a "
          "failover it would decide new connections otherwise",
          s.peer_node_id, s.peer_rules_digest, s.rules_digest);
    } else if (logged_rules_differ_) {
      spdlog::info("sync: peer node {} runs the same rules as this node again (digest {:016x})",
                   s.peer_node_id, s.rules_digest);
    }
    logged_rules_differ_ = rules_differ;
  }
  if (c.peer_restarts > oc.peer_restarts) {
    spdlog::info("sync: peer node {} restarted (epoch {}): asking for its table", s.peer_node_id,
                 s.peer_epoch);
  }
  if (s.bulk_state != o.bulk_state) {
    switch (s.bulk_state) {
      case BulkState::Idle:
        break;
      case BulkState::Requested:
        spdlog::info("sync: bulk requested from the peer");
        break;
      case BulkState::Receiving:
        spdlog::info("sync: bulk started, {} states announced", s.bulk_expected);
        break;
      case BulkState::Done:
        spdlog::info("sync: bulk done, {} states received, {} announced at the end", s.bulk_received,
                     s.bulk_end_count);
        break;
      case BulkState::TimedOut:
        spdlog::warn("sync: bulk timed out ({} of {} states): no longer demoted, continuing", s.bulk_received,
                     s.bulk_expected);
        break;
    }
  }
  if (const uint64_t holes = holes_log_.due(c.holes, now)) {
    spdlog::info(
        "sync: {} gaps in the peer's sequence since the last report ({} datagrams held past them): "
        "resends requested",
        holes, s.held);
  }
  // The peer then looks silent from both sides: only this says that it is this node that cannot send
  // (the sync link down, a local firewall's EPERM, the bound address gone).
  if (const uint64_t refused = send_errors_log_.due(c.send_errors, now)) {
    spdlog::warn("sync: {} datagrams to {} refused by this node since the last report: {}", refused,
                 destination_.address().to_string(),
                 last_send_error_ ? last_send_error_.message() : "a datagram could not be built");
  }
  if (c.gaps > oc.gaps) {
    spdlog::warn(
        "sync: {} sequences from the peer were lost beyond its resend window ({} gaps in all): "
        "incremental resync requested",
        c.gap_sequences - oc.gap_sequences, c.gaps);
  }
  // Rings overflow for as long as the load that fills them lasts: a pump (every 2 ms) finds more.
  if (changes_lost_log_.due(c.changes_lost, now) != 0) {
    spdlog::warn(
        "sync: the engine dropped state changes before sync saw them ({} lost in all): the peer "
        "gets a full resync once it answers",
        events_lost_ ? events_lost_() : 0);
  }
  if (c.pending_overflows > oc.pending_overflows) {
    spdlog::warn(
        "sync: too many local changes waited for the peer: dropped, the peer gets a full resync once it "
        "answers");
  }
  if (c.full_resyncs_started > oc.full_resyncs_started) {
    spdlog::warn(
        "sync: full resync of the peer started (changes no resend or incremental resync could deliver)");
  }
  if (c.full_resyncs_received > oc.full_resyncs_received) {
    spdlog::warn("sync: the peer started a full resync");
  }
  if (c.peer_states_removed > oc.peer_states_removed) {
    spdlog::warn(
        "sync: {} states the peer no longer has removed at the end of its full transfer (their "
        "deletes were lost)",
        c.peer_states_removed - oc.peer_states_removed);
  }
  if (const uint64_t evicted = evictions_log_.due(c.window_evictions, now)) {
    spdlog::warn(
        "sync: resend window full: {} unacked datagrams evicted since the last report (their states are "
        "kept for a resync)",
        evicted);
  }
  if (c.evicted_ids_dropped > oc.evicted_ids_dropped) {
    spdlog::warn("sync: {} state ids of evicted datagrams dropped: a gap over them needs a full resync",
                 c.evicted_ids_dropped - oc.evicted_ids_dropped);
  }
  // A full table fails the peer's records for as long as it stays full (a bulk, the state requests
  // its updates bring): told at every status refresh, that is up to 200 lines a second.
  if (const uint64_t failed = apply_failed_log_.due(c.apply_failed, now)) {
    spdlog::warn("sync: {} peer states not applied since the last report: the state table is full", failed);
  }
  // Drops can come in floods (a forger): one summary line per period at most.
  bool dropped = false;
  for (std::size_t i = 0; i < kDropReasonCount; ++i) dropped = dropped || c.drops[i] != last_drops_[i];
  if (dropped && now - last_drop_log_ >= kDropLogPeriod) {
    std::string what;
    for (std::size_t i = 0; i < kDropReasonCount; ++i) {
      if (c.drops[i] == last_drops_[i]) continue;
      if (!what.empty()) what += ", ";
      what += std::string(drop_reason_name(static_cast<DropReason>(i))) + " " +
              std::to_string(c.drops[i] - last_drops_[i]);
    }
    const auto bad_ttl = static_cast<std::size_t>(DropReason::BadTtl);
    if (c.drops[bad_ttl] != last_drops_[bad_ttl]) {
      what +=
          " (bad_ttl: not sent on the sync link; a router between the nodes needs [sync] ttl_security = "
          "false)";
    }
    spdlog::warn("sync: datagrams dropped: {}", what);
    last_drops_ = c.drops;
    last_drop_log_ = now;
  }
  ProtocolStatus next = s;
  logged_ = std::move(next);
}

ProtocolStatus SyncService::status() const {
  std::lock_guard lock(status_mutex_);
  return status_;
}

std::string SyncService::link_interface() const {
  std::lock_guard lock(status_mutex_);
  return link_interface_;
}

void SyncService::fill_status(control::SyncStatus* out) {
  const Micros now = steady_now();
  ProtocolStatus s;
  Micros taken{0};
  std::string peer;
  {
    std::lock_guard lock(status_mutex_);
    s = status_;
    taken = status_time_;
    peer = peer_text_;
  }
  const auto& c = s.counters;
  out->set_enabled(true);
  out->set_peer_address(peer);
  out->set_peer_node_id(s.peer_node_id);
  out->set_peer_state(peer_state_value(s));
  const Micros age = s.last_heard_age + (taken.count() > 0 ? now - taken : Micros{0});
  out->set_last_heard_ms_ago(s.peer_heard ? age.count() / 1000 : -1);
  out->set_bulk_state(bulk_state_value(s.bulk_state));
  out->set_bulk_received(s.bulk_received);
  out->set_bulk_expected(s.bulk_expected);
  out->set_bulk_done(bulk_done());
  out->set_datagrams_sent(c.datagrams_sent);
  out->set_datagrams_received(c.datagrams_received);
  out->set_messages_sent(c.messages_sent);
  out->set_messages_received(c.messages_received);
  out->set_resends(c.resends);
  // Gaps detected in the peer's stream (filled by resends, or given up and resynced).
  out->set_gaps(c.holes + c.gaps);
  // Resyncs this node needed: incremental (it asked for a range) and full (the peer sent all).
  out->set_resyncs(c.resync_requests_sent + c.full_resyncs_received);
  for (std::size_t i = 0; i < kDropReasonCount; ++i) {
    if (c.drops[i] != 0)
      (*out->mutable_drops())[std::string(drop_reason_name(static_cast<DropReason>(i)))] = c.drops[i];
  }
  out->set_resend_window_depth(s.outstanding);
  out->set_datagram_bytes(static_cast<uint32_t>(s.max_datagram));
  out->set_events_lost(events_lost_ ? events_lost_() : 0);
  out->set_peer_states_removed(c.peer_states_removed);
  out->set_tables_sent(c.tables_sent);
  out->set_tables_received(c.tables_received);
  out->set_rules_digest(s.rules_digest);
  // What a peer that is no longer up said last is not compared.
  out->set_peer_rules_digest(s.peer_state == PeerState::Up ? s.peer_rules_digest : 0);
  if (config_.defer) {
    auto* d = out->mutable_defer();
    d->set_enabled(true);
    d->set_timeout_ms(static_cast<uint32_t>(config_.defer_timeout.count()));
    if (defer_status_) defer_status_(d);
  }
}

void SyncService::render_metrics(control::MetricWriter& w) const {
  using T = control::MetricWriter::Type;
  const ProtocolStatus s = status();
  const auto& c = s.counters;
  w.family("pairwall_sync_peer_state", T::Gauge, "1 for the sync peer's current state (up, one_way, down).");
  for (PeerState p : {PeerState::Up, PeerState::OneWay, PeerState::Down}) {
    w.sample({{"state", peer_state_name(p)}}, uint64_t{s.peer_state == p ? 1u : 0u});
  }
  w.family("pairwall_sync_last_heard_seconds", T::Gauge, "Since the last datagram accepted from the peer.");
  w.sample(s.peer_heard ? static_cast<double>(s.last_heard_age.count()) / 1e6 : -1.0);
  w.family("pairwall_sync_bulk_done", T::Gauge, "1 once this node's initial bulk ended or timed out.");
  w.sample(uint64_t{bulk_done() ? 1u : 0u});
  w.family("pairwall_sync_peer_rules_match", T::Gauge,
           "1 when the peer runs the same rules as this node, 0 when not, -1 until known.");
  w.sample(rules_known(s) ? (s.rules_digest == s.peer_rules_digest ? 1.0 : 0.0) : -1.0);
  w.family("pairwall_sync_datagrams_total", T::Counter, "Sync datagrams sent and accepted.");
  w.sample({{"direction", "sent"}}, c.datagrams_sent);
  w.sample({{"direction", "received"}}, c.datagrams_received);
  w.family("pairwall_sync_datagrams_on_accept_key_total", T::Counter,
           "Accepted datagrams signed with accept_key_file's key rather than key_file's: the peer signs "
           "with it.");
  w.sample(c.datagrams_on_accept_key);
  w.family("pairwall_sync_bytes_total", T::Counter, "Sync datagram bytes sent and accepted.");
  w.sample({{"direction", "sent"}}, c.bytes_sent);
  w.sample({{"direction", "received"}}, c.bytes_received);
  w.family("pairwall_sync_messages_total", T::Counter, "Sync messages (records and controls).");
  w.sample({{"direction", "sent"}}, c.messages_sent);
  w.sample({{"direction", "received"}}, c.messages_received);
  // A peer of a later version may send a kind of message this one does not know: what it said
  // there is not applied here, and only this says so.
  w.family("pairwall_sync_messages_ignored_total", T::Counter,
           "Peer messages of a type this node does not know (a later version's), ignored.");
  w.sample(c.messages_unknown);
  w.family("pairwall_sync_drops_total", T::Counter,
           "Datagrams rejected, by reason; malformed_payload also counts each record of an accepted "
           "datagram that is left out (out of range, or not fitting the state it names).");
  for (std::size_t i = 0; i < kDropReasonCount; ++i) {
    w.sample({{"reason", drop_reason_name(static_cast<DropReason>(i))}}, c.drops[i]);
  }
  w.family("pairwall_sync_send_errors_total", T::Counter,
           "Datagrams this node's socket refused to send (the sync link down, a local firewall).");
  w.sample(c.send_errors);
  w.family("pairwall_sync_socket_reopens_total", T::Counter,
           "Times the sync socket was opened again on an interface of the same name and a new index "
           "(deleted and made again).");
  w.sample(socket_reopens_.load(std::memory_order_relaxed));
  w.family("pairwall_sync_resends_total", T::Counter, "Datagrams sent again after a loss.");
  w.sample(c.resends);
  w.family("pairwall_sync_gaps_total", T::Counter,
           "Gaps in the peer's stream: detected (resends asked), given up (beyond its resend window), and "
           "datagrams dropped past this node's receive window for the peer to resend (its resend_window is "
           "larger than this node's).");
  w.sample({{"outcome", "detected"}}, c.holes);
  w.sample({{"outcome", "given_up"}}, c.gaps);
  w.sample({{"outcome", "beyond_window"}}, c.beyond_window);
  w.family("pairwall_sync_resyncs_total", T::Counter, "Resyncs, by kind and side.");
  w.sample({{"kind", "incremental_requested"}}, c.resync_requests_sent);
  w.sample({{"kind", "incremental_served"}}, c.resync_requests_served);
  w.sample({{"kind", "incremental_stale"}}, c.resync_requests_stale);
  w.sample({{"kind", "full_started"}}, c.full_resyncs_started);
  w.sample({{"kind", "full_received"}}, c.full_resyncs_received);
  w.family("pairwall_sync_records_applied_total", T::Counter, "Peer records, by what applying them did.");
  w.sample({{"result", "applied"}}, c.applied);
  w.sample({{"result", "stale"}}, c.apply_stale);
  w.sample({{"result", "unknown"}}, c.apply_unknown);
  w.sample({{"result", "failed"}}, c.apply_failed);
  w.family("pairwall_sync_records_queued_total", T::Counter, "Local state changes handed to sync.");
  w.sample(c.records_queued);
  w.family("pairwall_sync_records_coalesced_total", T::Counter, "Local changes folded into a pending one.");
  w.sample(c.records_coalesced);
  w.family("pairwall_sync_window_evictions_total", T::Counter,
           "Unacked datagrams pushed out of the resend window.");
  w.sample(c.window_evictions);
  w.family("pairwall_sync_bulk_states_total", T::Counter, "States sent and received in bulk transfers.");
  w.sample({{"direction", "sent"}}, c.bulk_states_sent);
  w.sample({{"direction", "received"}}, c.bulk_states_received);
  w.family("pairwall_sync_tables_total", T::Counter,
           "Shared tables ([sync] tables) sent and received whole, one version each.");
  w.sample({{"direction", "sent"}}, c.tables_sent);
  w.sample({{"direction", "received"}}, c.tables_received);
  w.family("pairwall_sync_table_chunks_total", T::Counter,
           "Chunks of shared tables sent, and received stale (a version taken already, or superseded).");
  w.sample({{"outcome", "sent"}}, c.table_chunks_sent);
  w.sample({{"outcome", "stale"}}, c.table_chunks_stale);
  w.family("pairwall_sync_peer_states_removed_total", T::Counter,
           "The peer's states removed at the end of its full transfer: it no longer had them.");
  w.sample(c.peer_states_removed);
  w.family("pairwall_sync_resend_window", T::Gauge, "Datagrams not yet acked by the peer.");
  w.sample(static_cast<uint64_t>(s.outstanding));
  w.family("pairwall_sync_rtt_seconds", T::Gauge, "Smoothed round trip to the peer.");
  w.sample(static_cast<double>(s.srtt.count()) / 1e6);
  w.family("pairwall_sync_events_lost_total", T::Counter, "State changes the engine's rings dropped (full).");
  w.sample(events_lost_ ? events_lost_() : uint64_t{0});
}

}  // namespace pairwall::sync
