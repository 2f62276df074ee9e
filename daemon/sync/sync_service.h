// State sync inside pairwalld: the protocol core on its own thread and Asio loop, a UDP socket on
// the dedicated sync link, the engine's state change rings drained on a short timer, the peer's
// records applied to the engine, status for pairwallctl and metrics for Prometheus.
//
//   workers' rings + engine control ring ─(every 2 ms, or a kick)─▶ SyncProtocol::enqueue ─▶ poll ─▶ socket
//   socket ─▶ SyncProtocol::receive ─▶ EngineStore::apply (Engine::apply)
//             └─ acks ─▶ SyncProtocol::synced() ─▶ each ring's SyncedFn (defer: held packets go)
//
// The socket is bound to the sync interface (SO_BINDTODEVICE) so that sync never leaks onto, or
// is accepted from, another link; datagrams leave with DSCP CS6 (network control, RFC 4594). With
// [sync] ttl_security they leave with TTL / hop limit 255, and only those that arrive with 255 are
// read any further (RFC 5082): nothing from beyond the link gets as far as the HMAC.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/control/control_api.h"
#include "daemon/control/metrics.h"
#include "daemon/engine/engine.h"
#include "daemon/sync/engine_store.h"
#include "daemon/sync/protocol.h"
#include "daemon/sync/sync_config.h"

namespace pairwall::sync {

class SyncService final : public control::SyncControl {
 public:
  // `node_id`: this node's [node] id. Touches neither the network nor a thread until start().
  // `epoch`: this start's boot epoch (control/boot_epoch.h); 0 takes the wall clock.
  SyncService(engine::Engine& engine, SyncConfig config, uint32_t node_id, uint64_t epoch = 0);
  ~SyncService() override;
  SyncService(const SyncService&) = delete;
  SyncService& operator=(const SyncService&) = delete;

  // How many of a ring's records the peer has (acknowledged), and whether the peer answers. Called
  // on the sync thread when either changes.
  using SyncedFn = std::function<void(uint64_t synced, bool peer_up)>;

  // A ring of state changes to drain (each worker's, then the engine's control ring). Before
  // start(). A record of a later ring goes out after every record an earlier ring received before
  // it: a kill's delete after the insert of the state it removed (see pump()).
  void add_ring(engine::SpscRing<engine::StateRecord>& ring, SyncedFn on_synced = {});
  // Drains the rings now rather than at the next period (a worker holds packets until their
  // inserts are acked). Any thread, any time (before start() it takes effect at start); a write
  // to an eventfd, no allocation.
  void kick() noexcept;
  // Records the rings dropped because they were full, for status (the engine counts them).
  void set_events_lost(std::function<uint64_t()> events_lost) { events_lost_ = std::move(events_lost); }
  // Fills the defer part of the status (the packet path keeps those counters). Control thread.
  void set_defer_status(std::function<void(control::SyncStatus::Defer*)> fill) {
    defer_status_ = std::move(fill);
  }
  // Called once, on the sync thread, when this node's initial bulk ends or times out.
  void on_bulk_done(std::function<void()> callback) { bulk_done_callback_ = std::move(callback); }

  // Opens the socket and starts the sync thread. Throws std::runtime_error with a message naming
  // the interface, address and what failed (e.g. the interface does not exist).
  void start();
  void stop();

  // The keys to sign with and to accept besides (empty: none), from a SIGHUP that re-read the key
  // files: taken on the sync thread before its next datagram. Control thread.
  void set_keys(std::vector<uint8_t> key, std::vector<uint8_t> accept_key);

  // [sync] defer and defer_timeout_ms from a reload: the status shows them at once, and datagrams
  // that carry inserts ask the peer for an ack at once (or no longer) from the sync thread's next
  // one. The packet path's switch is the queues' (NfQueue::set_defer). Control thread.
  void set_defer(bool enabled, std::chrono::milliseconds timeout);

  // The link a reload names ([sync] interface, address, peer or group, port, ttl_security), taken
  // as pfsync takes a new syncdev or syncpeer on a running interface: the socket is opened anew
  // with them on the sync thread, and what the peer missed while the two nodes' links differed is
  // resent, or resynced, as after any outage. Returns what refused the move (the interface absent,
  // the address and port taken), the running link kept then; empty when moved or unchanged. A
  // move to the other address family sizes the datagrams for its headers. Control thread; waits
  // for the sync thread.
  std::string move_link(const SyncConfig& next);

  // [sync] flush_interval_ms, bulk_timeout_min_s, pending_limit, peer_node_id, resend_window and
  // mtu from a reload, taken on the sync thread before its next datagram (SyncProtocol::retune,
  // set_max_datagram). Control thread.
  void retune(const SyncConfig& next);

  // This node's initial bulk ended (or timed out): until then failover keeps it demoted. Any thread.
  bool bulk_done() const noexcept { return bulk_done_.load(std::memory_order_acquire); }

  // A shared table's entries as this node now holds them ([sync] tables): sent whole from the sync
  // thread (SyncProtocol::share_table). Control thread.
  void share_table(const std::string& name, std::vector<engine::AgedTableEntry> entries) override;
  // Called on the sync thread with each shared table the peer sends whole. Before start().
  void on_peer_table(std::function<void(const SharedTable&)> callback) { peer_table_ = std::move(callback); }

  // For pairwallctl (control thread).
  void fill_status(control::SyncStatus* status) override;
  // The request goes out from the sync thread, within a millisecond; the bulk follows as at start.
  std::string request_resync() override;
  // Prometheus families pairwall_sync_* (control thread).
  void render_metrics(control::MetricWriter& w) const;
  ProtocolStatus status() const;
  // The interface the link runs on: the config's, then a reload's once the sync thread has moved
  // the link, which may be after move_link() stopped waiting for it. Any thread.
  std::string link_interface() const;

 private:
  void open_socket();
  // move_link() on the sync thread.
  std::string take_link(const SyncConfig& next);
  void arm_receive();
  void arm_kick();
  void on_readable(const boost::system::error_code& ec);
  // One datagram into rx_buffer_: its size, or -1 when none waits (or the socket failed). `ttl`:
  // the IPv4 TTL or IPv6 hop limit it arrived with, -1 when the kernel did not say.
  ssize_t receive_one(int& ttl) noexcept;
  void report_synced(Micros now);
  void pump();
  void arm_timer(Micros now);
  // Opens the socket anew once the sync interface has another index than the one it is bound to.
  void follow_interface(Micros now);
  void log_changes(const ProtocolStatus& s, Micros now);
  bool send(std::span<const uint8_t> datagram) noexcept;

  SyncConfig config_;
  uint32_t node_id_;
  uint64_t epoch_;
  EngineStore store_;
  struct Ring {
    engine::SpscRing<engine::StateRecord>* ring;
    SyncedFn on_synced;
    // (records popped, SyncProtocol::enqueued() then), while the protocol's synced() is below it.
    std::deque<std::pair<uint64_t, uint64_t>> marks;
    uint64_t synced = 0;
    std::size_t drain_to = 0;  // the records this pump takes: those pushed when it began
    bool peer_up = false;
    bool reported = false;
  };
  std::vector<Ring> rings_;
  std::function<uint64_t()> events_lost_;
  uint64_t events_lost_seen_ = 0;  // the count the last full resync made good (sync thread only)
  std::function<void()> bulk_done_callback_;
  std::function<void(const SharedTable&)> peer_table_;
  std::function<void(control::SyncStatus::Defer*)> defer_status_;

  boost::asio::io_context io_;
  boost::asio::ip::udp::socket socket_;
  boost::asio::steady_timer timer_;
  int kick_fd_ = -1;                            // an eventfd
  boost::asio::posix::stream_descriptor kick_;  // kick_fd_ on the loop
  uint64_t kick_count_ = 0;
  boost::asio::ip::udp::endpoint destination_;
  std::vector<uint8_t> rx_buffer_;
  std::unique_ptr<SyncProtocol> protocol_;
  std::thread thread_;
  std::atomic<bool> bulk_done_{false};
  bool running_ = false;

  // The status the control thread reads: refreshed by the sync thread every few milliseconds.
  mutable std::mutex status_mutex_;
  ProtocolStatus status_;
  std::string peer_text_;       // [sync] peer or group, as the link runs
  std::string link_interface_;  // [sync] interface, as the link runs
  Micros status_time_{0};
  Micros last_status_{0};

  // What was last logged, to log changes only.
  ProtocolStatus logged_;
  Micros last_drop_log_{0};
  // A counter logged at most once a period, with what it gained since it was last logged.
  struct ThrottledCount {
    uint64_t logged = 0;
    Micros last{0};
    // What `count` gained since the last report when one is due at `now`, else 0 (and then the
    // gain waits for the next).
    uint64_t due(uint64_t count, Micros now);
  };
  ThrottledCount holes_log_;
  ThrottledCount evictions_log_;
  ThrottledCount send_errors_log_;
  ThrottledCount apply_failed_log_;
  ThrottledCount changes_lost_log_;
  PeerState logged_peer_state_ = PeerState::Down;
  bool logged_rules_differ_ = false;
  Micros peer_state_since_{0};
  // Why the socket last refused a datagram (sync thread only), for the log.
  boost::system::error_code last_send_error_;
  // The sync interface's index the socket is bound to (sync thread only): an interface deleted and
  // made again (a VLAN or bond recreated by a network restart) has a new one, and a socket bound
  // to the old index, its group joined there, neither sends nor hears.
  unsigned ifindex_ = 0;
  Micros next_interface_check_{0};
  bool interface_missing_logged_ = false;
  unsigned reopen_failed_index_ = 0;  // the index a reopen last failed on, logged once
  std::atomic<uint64_t> socket_reopens_{0};
  std::array<uint64_t, kDropReasonCount> last_drops_{};
};

}  // namespace pairwall::sync
