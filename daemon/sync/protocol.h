// The sync protocol between the two nodes, without sockets or clocks: bytes and time in, bytes
// out. One instance per node talks to its one peer.
//
//   local state changes ─enqueue()─▶ PendingRecords ─┐
//   resync / state requests ─▶ backlog ──────────────┼─poll()─▶ datagrams (seal: header + HMAC)
//   bulk transfer (snapshot of ids) ─────────────────┘             │ SendWindow keeps them until acked
//   datagrams from the peer ─receive()─▶ TTL ─▶ open (magic, version, length, tag) ─▶ sender, epoch, replay
//        ─▶ acks to SendWindow ─▶ ReceiveWindow (in order) ─▶ StateStore::apply / control messages
//
// Reliability: every data datagram has a sequence; the receiver acks cumulatively with a
// selective-ack bitmap; the sender resends what is lost (RACK + timer). A sequence the sender can
// no longer resend is given up by the receiver, counted as a gap and answered by an incremental
// resync: the current version of every state that sequence carried, closed by a ResyncEnd. A gap
// even that cannot cover starts a full resync (a bulk transfer). A bulk transfer is done only once
// the resyncs of its gaps are in. Everything but control messages is paced by a congestion
// window on the acks (not by a fixed gap as pfsync's bulk): live records first, then resyncs, then
// the bulk. Live records that wait for the window coalesce per state, so a slow peer or a dead link
// costs at most one pending record per state, and nothing is dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "daemon/engine/state.h"
#include "daemon/sync/counters.h"
#include "daemon/sync/pending.h"
#include "daemon/sync/receive_window.h"
#include "daemon/sync/replay_window.h"
#include "daemon/sync/send_window.h"
#include "daemon/sync/store.h"
#include "daemon/sync/table_share.h"
#include "daemon/sync/time.h"
#include "daemon/sync/wire.h"
#include "proto/sync.pb.h"

namespace pairwall::sync {

enum class PeerState : uint8_t {
  Down,    // nothing heard from the peer for the dead interval (or ever)
  OneWay,  // the peer is heard, but its keepalives say it does not hear this node
  Up,
};

enum class BulkState : uint8_t {
  Idle,       // no bulk asked for
  Requested,  // asked; waiting for BulkStart
  Receiving,  // BulkStart seen; waiting for BulkEnd, and for the resyncs of the gaps before it
  Done,
  TimedOut,  // gave up waiting (the peer is absent, or slower than the count allows)
};

std::string_view peer_state_name(PeerState s);
std::string_view bulk_state_name(BulkState s);

struct ProtocolConfig {
  uint32_t node_id = 1;
  uint32_t peer_node_id = 0;        // 0: the first authenticated sender that is not this node
  uint64_t epoch = 1;               // this boot's epoch; must grow across restarts
  std::size_t max_datagram = 1452;  // UDP payload bytes: link MTU minus IP and UDP headers
  Micros flush_interval{10'000};
  Micros keepalive_interval{200'000};
  // Peer silent this long: down. Keepalive interval x 4 keeps detection under 1 s.
  Micros dead_interval{800'000};
  Micros ack_delay{1'000};
  std::size_t ack_every = 2;  // ack at once after this many in-order datagrams (RFC 1122 4.2.3.2)
  std::size_t receive_window = 8192;
  SendWindowConfig send;
  // The requester waits bulk_timeout_min for BulkStart, then bulk_timeout_min + count / bulk_min_rate
  // for BulkEnd: derived from the announced count, not from the state limit.
  Micros bulk_timeout_min{5'000'000};
  double bulk_min_rate = 10'000;
  bool request_bulk_at_start = true;
  uint32_t state_requests_per_s = 2'000;
  // Local changes waiting for the window (one per state at most, they coalesce). Past this many
  // (a link down for a long time under heavy churn) they are dropped and the peer gets a full
  // resync once it answers again.
  std::size_t pending_limit = 1u << 20;
  // A learned peer id may change (the peer node was replaced) once it has been down this long.
  Micros peer_relearn{10'000'000};
  // Datagrams carrying inserts ask the peer to ack at once (frameflag::kAckNow): the node holds
  // new connections' first packets until then (pfsync's defer).
  bool ack_inserts_at_once = false;
  // Datagrams that did not arrive with kLinkTtl are dropped (bad_ttl) before any other check: the
  // peer is on the sync link ([sync] ttl_security). Off, a routed path between the nodes works.
  bool ttl_security = true;
};

struct ProtocolStatus {
  PeerState peer_state = PeerState::Down;
  uint32_t node_id = 0;
  uint64_t epoch = 0;
  uint32_t peer_node_id = 0;  // 0 until heard
  uint64_t peer_epoch = 0;
  bool peer_heard = false;
  Micros last_heard_age{0};  // valid when peer_heard
  bool peer_bulk_done = false;
  // The digests of this node's rule set and of the peer's, from its last keepalive (0: unknown).
  uint64_t rules_digest = 0;
  uint64_t peer_rules_digest = 0;
  BulkState bulk_state = BulkState::Idle;
  bool bulk_done = false;  // this node's initial bulk ended or timed out
  uint32_t bulk_request = 0;
  uint64_t bulk_expected = 0;
  uint64_t bulk_received = 0;
  uint64_t bulk_end_count = 0;   // what the last BulkEnd said was sent
  std::size_t max_datagram = 0;  // UDP payload bytes a datagram fills up to
  bool bulk_sending = false;
  uint64_t bulk_send_total = 0;
  uint64_t bulk_send_done = 0;
  std::size_t pending_records = 0;
  std::size_t backlog = 0;
  std::size_t outstanding = 0;
  std::size_t in_flight = 0;
  double cwnd = 0;
  Micros srtt{0};
  Micros rto{0};
  std::size_t evicted_ids = 0;
  std::size_t held = 0;
  SyncCounters counters;
};

// A wire::Batch on an arena that is reset for each datagram: once the arena's first block is warm,
// building or parsing a datagram takes nothing from the heap.
class BatchArena {
 public:
  BatchArena();
  // A new empty batch; every batch this arena gave before is gone.
  wire::Batch* fresh();
  // Another batch living until the next fresh().
  wire::Batch* another();

 private:
  std::unique_ptr<char[]> block_;  // uninitialized: the arena writes before it reads
  google::protobuf::Arena arena_;
};

class SyncProtocol {
 public:
  // Sends one datagram; false when the socket refused it (counted; reliability resends).
  using SendFn = std::function<bool(std::span<const uint8_t>)>;

  // `key`: the shared HMAC key (at least 32 bytes), which signs; datagrams are accepted under it or
  // under `accept_key` (if not empty). Throws std::runtime_error if HMAC cannot be set up.
  SyncProtocol(const ProtocolConfig& config, std::span<const uint8_t> key, StateStore& store, Micros now,
               std::span<const uint8_t> accept_key = {});
  ~SyncProtocol();
  SyncProtocol(const SyncProtocol&) = delete;
  SyncProtocol& operator=(const SyncProtocol&) = delete;

  // A change of the local state table, to send to the peer.
  void enqueue(const engine::StateRecord& record, Micros now) noexcept;

  // Local changes enqueued so far, and how many of the first of them the peer has: each sent in
  // a datagram it acknowledged (or folded into a later record that was). For holding packets
  // until their states are on the peer.
  uint64_t enqueued() const noexcept { return enqueued_; }
  uint64_t synced() const noexcept { return synced_; }

  // This node's content of a table the pair shares changed (TableShare): it goes whole, after the
  // live records, once this node's initial bulk is done (until then the peer's version may replace
  // it) and at most once a second.
  void share_table(SharedTable table, Micros now);
  // Called with a shared table the peer sent, once all of a newer version is in (from receive()).
  using TableFn = std::function<void(const SharedTable&)>;
  void on_peer_table(TableFn fn) { peer_table_ = std::move(fn); }

  // The engine dropped local changes before they reached enqueue() (a full ring): which states
  // they were is unknown, so the peer gets the whole table once it answers.
  void local_changes_lost() noexcept;

  // One datagram from the socket, with the IPv4 TTL or IPv6 hop limit it arrived with (-1 when the
  // socket did not say). Drops and counts what it cannot accept.
  void receive(std::span<const uint8_t> datagram, int ttl, Micros now) noexcept;

  // Sends everything due at `now`: resends, flushes, bulk, acks, keepalives.
  void poll(Micros now, const SendFn& send) noexcept;

  // Sends the live records that wait for their flush at once, as far as the window lets them:
  // the last a node sends before it stops.
  void flush(Micros now, const SendFn& send) noexcept;

  // When poll() has something to do next (now when it has work already).
  Micros next_deadline(Micros now) const noexcept;

  // Asks the peer for its whole table (again).
  void request_bulk(Micros now) noexcept;

  // Changes the keys (a SIGHUP that re-read the key files). Throws as the constructor does.
  void set_keys(std::span<const uint8_t> key, std::span<const uint8_t> accept_key);
  // ProtocolConfig::ack_inserts_at_once, for defer turned on or off by a reload.
  void set_ack_inserts_at_once(bool at_once) noexcept { config_.ack_inserts_at_once = at_once; }
  // ProtocolConfig::ttl_security, for a sync link moved by a reload.
  void set_ttl_security(bool on) noexcept { config_.ttl_security = on; }
  // ProtocolConfig::max_datagram, for a reload that changed the link's MTU or address family: the
  // datagrams sent from now on fill up to it (clamped as the constructor clamps it); those kept for
  // resending go again as they were sent.
  void set_max_datagram(std::size_t bytes);
  std::size_t max_datagram() const noexcept { return config_.max_datagram; }
  // What a reload may change of the rest: each read where it is used, so it holds from the next
  // flush, the next bulk, the next change queued, the next datagram heard. The resend window
  // evicts its oldest datagrams at once if it holds more than its new capacity; the receive window
  // only grows (what it holds was acked).
  struct Tuning {
    Micros flush_interval;
    Micros bulk_timeout_min;
    std::size_t pending_limit;
    uint32_t peer_node_id;
    std::size_t resend_window;   // SendWindowConfig::capacity
    std::size_t receive_window;  // ProtocolConfig::receive_window
  };
  void retune(const Tuning& t);

  // This node's initial bulk ended (or timed out): until then it must not become master.
  bool bulk_done() const noexcept { return initial_bulk_done_; }
  BulkState bulk_state() const noexcept { return bulk_state_; }
  PeerState peer_state(Micros now) const noexcept;
  const SyncCounters& counters() const noexcept { return counters_; }
  ProtocolStatus status(Micros now) const;

 private:
  struct GapRange {
    uint64_t first = 0;
    uint64_t last = 0;
  };

  // Receiving.
  bool accept_sender(const Header& h, Micros now, bool& new_epoch) noexcept;
  void take_challenge(const Header& h, const wire::Batch& batch, Micros now) noexcept;
  bool proven(const Header& h, const wire::Batch& batch, Micros now) noexcept;
  void start_peer_epoch(const Header& h, Micros now);
  void deliver(uint64_t seq, std::span<const uint8_t> payload, bool parsed, Micros now);
  void apply_batch(const wire::Batch& batch, bool sequenced, Micros now);
  void apply_record(const engine::StateRecord& record, Micros now);
  void give_up(uint64_t first, uint64_t last);
  void serve_bulk(uint32_t request, Micros now);
  void serve_resync(const wire::ResyncRequest& request, Micros now);
  void bulk_started(uint32_t request, uint64_t count, uint64_t snapshot_seq, Micros now);
  void bulk_ended(uint32_t request, uint64_t count);
  void resync_ended(const wire::ResyncEnd& end);
  void finish_bulk();

  // Sending.
  bool has_background() const noexcept;
  bool controls_waiting() const noexcept;
  bool flush_due(Micros now) const noexcept;
  bool send_data(Micros now, bool live, bool background, const SendFn& send);
  bool add_message(const std::function<void(wire::Message*)>& fill);
  void transmit(uint64_t seq, std::span<const uint8_t> payload, Micros now, const SendFn& send,
                uint8_t flags = 0);
  void mark_sent() noexcept;
  void advance_synced() noexcept;
  void send_unsequenced(bool keepalive, Micros now, const SendFn& send);
  Header make_header(uint64_t seq) noexcept;

  ProtocolConfig config_;
  std::unique_ptr<Authenticator> auth_;
  StateStore& store_;
  SyncCounters counters_;
  uint64_t xmit_ = 0;
  std::vector<uint8_t> out_;  // datagram being sealed

  // Sending side.
  SendWindow window_;
  PendingRecords pending_;
  std::deque<wire::Message> controls_;   // reliable control messages, sent before any record
  std::deque<engine::StateId> backlog_;  // states to send in their current version (resync)
  uint64_t backlog_taken_ = 0;           // ids ever taken off the backlog's front (sent or cleared)
  // A resync request served: once the backlog is taken up to `backlog_end`, its ResyncEnd is due.
  struct ResyncMark {
    uint64_t backlog_end = 0;
    uint64_t epoch = 0;    // the peer's, whose sequence carried the request
    uint64_t through = 0;  // the peer's sequence that carried the request
  };
  std::deque<ResyncMark> resync_marks_;
  TableShare tables_;
  std::deque<wire::Message> table_chunks_;  // of the tables due, to send after the live records
  TableFn peer_table_;
  BatchArena tx_arena_;
  wire::Batch* tx_batch_ = nullptr;
  wire::Batch* tx_controls_ = nullptr;  // the control messages of the datagram being built, for resyncs
  std::size_t tx_used_ = 0;
  std::size_t tx_budget_ = 0;
  std::vector<engine::StateId> tx_ids_;
  std::vector<uint8_t> tx_payload_;
  bool tx_inserts_ = false;  // the datagram being built carries a live insert
  Micros last_keepalive_{0};

  // What the peer has of the local changes: after each poll that left nothing pending, the count
  // enqueued then and the last sequence sent; a mark is reached when the peer acks that sequence.
  struct SyncedMark {
    uint64_t enqueued = 0;
    uint64_t seq = 0;
  };
  static constexpr std::size_t kMaxMarks = 4096;  // past it the oldest go: later marks cover them
  uint64_t enqueued_ = 0;
  uint64_t synced_ = 0;
  uint64_t marked_ = 0;
  std::deque<SyncedMark> marks_;

  // Bulk transfer being sent.
  bool bulk_sending_ = false;
  uint32_t bulk_send_request_ = 0;
  std::vector<engine::StateId> bulk_ids_;
  std::size_t bulk_pos_ = 0;
  uint64_t bulk_sent_ = 0;

  // Receiving side (one peer epoch).
  bool peer_known_ = false;
  uint32_t peer_id_ = 0;
  uint64_t peer_epoch_ = 0;
  ReplayWindow replay_;
  ReceiveWindow rwin_;
  BatchArena rx_arena_;
  BatchArena held_arena_;
  wire::Batch* rx_batch_ = nullptr;
  std::vector<GapRange> gaps_to_request_;
  uint64_t rx_seq_ = 0;  // the sequence of the peer's datagram being applied
  // This node's latest sequence that carried a ResyncRequest, and the latest the peer's ResyncEnd
  // said it answered: a transfer is not done while the resyncs of its gaps are owed.
  uint64_t resync_asked_ = 0;
  uint64_t resync_answered_ = 0;
  std::size_t acks_owed_ = 0;
  bool ack_now_ = false;
  bool sack_now_ = false;      // held datagrams changed: send the runs in an unsequenced ack
  bool rx_ack_valid_ = false;  // the datagram being received acks this node's epoch...
  uint64_t rx_cum_ = 0;        // ...up to here
  std::vector<uint64_t> sack_runs_;
  Micros ack_due_ = Micros::max();
  uint32_t state_requests_this_second_ = 0;
  Micros state_request_window_{0};

  // A new incarnation of the peer, challenged to prove it is live (Keepalive.challenge).
  struct Challenge {
    uint32_t node_id = 0;
    uint64_t epoch = 0;
    uint64_t nonce = 0;  // 0: none outstanding
    Micros sent{0};
  };
  Challenge challenge_;
  // The peer's last challenge, answered in every keepalive; taken from its latest epoch.
  uint64_t answer_ = 0;
  uint32_t answer_node_ = 0;
  uint64_t answer_epoch_ = 0;
  Micros answer_at_{0};

  // Liveness.
  Micros last_heard_{0};
  Micros peer_keepalive_at_{0};
  bool peer_keepalive_seen_ = false;
  uint64_t peer_heard_epoch_ = 0;
  uint32_t peer_heard_age_ms_ = 0xffffffff;
  bool peer_bulk_done_ = false;
  uint64_t peer_rules_digest_ = 0;

  // Bulk transfer asked for by this node.
  BulkState bulk_state_ = BulkState::Idle;
  bool initial_bulk_done_ = false;
  // This node holds every state it created before it started: it asked for no bulk, or one of the
  // peer's transfers ended (not timed out).
  bool table_whole_ = false;
  uint32_t bulk_request_ = 0;   // this node's latest request
  uint32_t bulk_transfer_ = 0;  // the transfer being received: the request, or a full resync
  uint64_t bulk_end_count_ = 0;
  uint32_t bulk_ended_ = 0;        // the last transfer whose BulkEnd came (its BulkStart may come after)
  bool full_resync_owed_ = false;  // pending records were dropped: send the whole table
  uint32_t next_bulk_request_ = 1;
  uint64_t bulk_expected_ = 0;
  uint64_t bulk_received_ = 0;
  uint64_t bulk_snapshot_seq_ = 0;  // the transfer's BulkStart.snapshot_seq, as delivered_ counts
  uint64_t bulk_gaps_ = 0;          // counters_.gaps when the transfer started
  // The peer's sequences as the store sees them (set_peer_sequence): its current epoch's, counted
  // on from those of its earlier epochs, so that they never go back.
  uint64_t delivered_base_ = 0;
  uint64_t delivered_ = 0;
  Micros bulk_deadline_ = Micros::max();
};

}  // namespace pairwall::sync
