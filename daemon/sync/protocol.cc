#include "daemon/sync/protocol.h"

#include <algorithm>
#include <limits>
#include <random>

#include "daemon/sync/records.h"

namespace pairwall::sync {
namespace {

constexpr uint32_t kUnsolicited = 0x80000000;  // bulk ids of full resyncs the sender started
constexpr std::size_t kRangeBytes = 24;        // a SeqRange on the wire, at most
constexpr std::size_t kMinDatagram = 256;
constexpr std::size_t kMaxSackRuns = 512;  // mostly one-byte varints: well inside any datagram
// The longest a bulk's count may add to its wait: 100 million states at 10,000/s take under 3 h.
constexpr Micros kMaxBulkAllowance{std::chrono::hours(24)};

// A random 64-bit value, never 0 (the wire's "none"): challenges and the first bulk id.
uint64_t random_nonce() {
  std::random_device device;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t{device()} << 32) | device();
  return v;
}

std::size_t varint_size(std::size_t v) {
  std::size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

bool receiving(BulkState s) {
  return s == BulkState::Requested || s == BulkState::Receiving;
}

}  // namespace

std::string_view peer_state_name(PeerState s) {
  switch (s) {
    case PeerState::Down:
      return "down";
    case PeerState::OneWay:
      return "one_way";
    case PeerState::Up:
      return "up";
  }
  return "unknown";
}

std::string_view bulk_state_name(BulkState s) {
  switch (s) {
    case BulkState::Idle:
      return "idle";
    case BulkState::Requested:
      return "requested";
    case BulkState::Receiving:
      return "receiving";
    case BulkState::Done:
      return "done";
    case BulkState::TimedOut:
      return "timed_out";
  }
  return "unknown";
}

namespace {
constexpr std::size_t kArenaBlock = 256 << 10;  // a datagram's messages, decoded, with room to spare
}  // namespace

BatchArena::BatchArena()
    : block_(new char[kArenaBlock]), arena_([this] {
        google::protobuf::ArenaOptions o;
        o.initial_block = block_.get();
        o.initial_block_size = kArenaBlock;
        return o;
      }()) {}

wire::Batch* BatchArena::fresh() {
  arena_.Reset();
  return google::protobuf::Arena::CreateMessage<wire::Batch>(&arena_);
}

wire::Batch* BatchArena::another() {
  return google::protobuf::Arena::CreateMessage<wire::Batch>(&arena_);
}

SyncProtocol::SyncProtocol(const ProtocolConfig& config, std::span<const uint8_t> key, StateStore& store,
                           Micros now, std::span<const uint8_t> accept_key)
    : config_(config),
      auth_(std::make_unique<Authenticator>(key, accept_key)),
      store_(store),
      window_(config.send),
      rwin_(config.receive_window) {
  // Room for the largest datagram whatever the MTU: one kept for resending goes again as it was
  // sent, after a reload that lowered the MTU too.
  out_.resize(kMaxPayload + kOverhead);
  set_max_datagram(config.max_datagram);
  last_keepalive_ = now - config_.keepalive_interval;
  // Bulk ids differ from one boot to the next, so that a transfer meant for an earlier boot (still
  // in the peer's resend window when this node restarted) is not taken for this one's.
  next_bulk_request_ = 1 + static_cast<uint32_t>(random_nonce() % (kUnsolicited - 1));
  if (config_.request_bulk_at_start) {
    request_bulk(now);
  } else {
    initial_bulk_done_ = true;
    table_whole_ = true;
  }
}

SyncProtocol::~SyncProtocol() = default;

// ---------------------------------------------------------------------------------------------
// Local changes and bulk requests.

void SyncProtocol::enqueue(const engine::StateRecord& record, Micros now) noexcept {
  ++counters_.records_queued;
  ++enqueued_;
  if (pending_.size() >= config_.pending_limit) {
    pending_.clear();
    ++counters_.pending_overflows;
    full_resync_owed_ = true;
  }
  pending_.add(record, now);
  counters_.records_coalesced = pending_.coalesced();
}

void SyncProtocol::share_table(SharedTable table, Micros now) {
  tables_.set_local(std::move(table), now);
}

void SyncProtocol::local_changes_lost() noexcept {
  ++counters_.changes_lost;
  full_resync_owed_ = true;
}

void SyncProtocol::request_bulk(Micros now) noexcept {
  bulk_request_ = next_bulk_request_;
  next_bulk_request_ = next_bulk_request_ + 1 >= kUnsolicited ? 1 : next_bulk_request_ + 1;
  bulk_state_ = BulkState::Requested;
  bulk_transfer_ = 0;  // an earlier transfer's records no longer count
  bulk_expected_ = 0;
  bulk_received_ = 0;
  bulk_deadline_ = now + config_.bulk_timeout_min;
  wire::Message m;
  m.mutable_bulk_request()->set_request(bulk_request_);
  controls_.push_back(std::move(m));
  ++counters_.bulk_requests_sent;
}

// ---------------------------------------------------------------------------------------------
// Receiving.

bool SyncProtocol::accept_sender(const Header& h, Micros now, bool& new_epoch) noexcept {
  if (h.node_id == config_.node_id) {
    ++counters_.drops[static_cast<std::size_t>(DropReason::UnknownSender)];
    return false;
  }
  const uint32_t expected = config_.peer_node_id != 0 ? config_.peer_node_id : peer_id_;
  if (expected != 0 && h.node_id != expected) {
    // A learned id may change when the node was replaced: only after the old one fell silent.
    if (config_.peer_node_id == 0 && now - last_heard_ >= config_.peer_relearn) {
      new_epoch = true;
      return true;
    }
    ++counters_.drops[static_cast<std::size_t>(DropReason::UnknownSender)];
    return false;
  }
  if (peer_known_ && h.epoch < peer_epoch_) {
    // The epoch is the peer's boot time: a peer that restarted with its clock behind (no RTC, NTP
    // not yet synced) would be refused for ever. Take it back like a replaced peer, only once the
    // incarnation we knew has been silent for peer_relearn, so that replayed datagrams of an old
    // epoch cannot interrupt a live peer.
    if (now - last_heard_ >= config_.peer_relearn) {
      new_epoch = true;
      return true;
    }
    ++counters_.drops[static_cast<std::size_t>(DropReason::StaleEpoch)];
    return false;
  }
  new_epoch = !peer_known_ || h.epoch > peer_epoch_;
  return true;
}

// The peer's challenge, answered in this node's next keepalive (sent at once) and every one after.
// A challenge from an older epoch than the one answered is a replay's, and would only keep the live
// peer's from being answered.
void SyncProtocol::take_challenge(const Header& h, const wire::Batch& batch, Micros now) noexcept {
  for (const wire::Message& m : batch.messages()) {
    if (!m.has_keepalive() || m.keepalive().challenge() == 0 || m.keepalive().challenge() == answer_)
      continue;
    if (h.node_id == answer_node_ && h.epoch < answer_epoch_ && now - answer_at_ < config_.dead_interval)
      continue;
    answer_ = m.keepalive().challenge();
    answer_node_ = h.node_id;
    answer_epoch_ = h.epoch;
    answer_at_ = now;
    last_keepalive_ = now - config_.keepalive_interval;
  }
}

// Whether a datagram of a new incarnation of the peer (a new epoch, the first heard, or a replaced
// node) proves that incarnation live: it answers the challenge this node sent it. Until one does,
// its datagrams are dropped: the HMAC proves who made a datagram, not when, and one replayed from
// an earlier boot could otherwise start an epoch and be applied (its ClearStates removing the
// states it had created, its BulkEnd ending this node's bulk). The sender resends what was
// dropped: the epoch starts at the proving datagram's send base.
bool SyncProtocol::proven(const Header& h, const wire::Batch& batch, Micros now) noexcept {
  if (challenge_.nonce != 0 && challenge_.node_id == h.node_id && challenge_.epoch == h.epoch) {
    for (const wire::Message& m : batch.messages()) {
      if (m.has_keepalive() && m.keepalive().answer() == challenge_.nonce) {
        challenge_ = {};
        ++counters_.epochs_proven;
        return true;
      }
    }
    return false;
  }
  // Another incarnation replaces the one challenged if it is later, or once that one had time to
  // answer: replays of an old epoch cannot keep a later one from proving itself.
  if (challenge_.nonce == 0 || h.node_id != challenge_.node_id || h.epoch > challenge_.epoch ||
      now - challenge_.sent >= config_.dead_interval) {
    challenge_ = {h.node_id, h.epoch, random_nonce(), now};
    last_keepalive_ = now - config_.keepalive_interval;  // ask at once
    ++counters_.challenges_sent;
  }
  return false;
}

void SyncProtocol::start_peer_epoch(const Header& h, Micros now) {
  const bool restart = peer_known_;
  if (restart && h.node_id == peer_id_ && h.epoch < peer_epoch_) ++counters_.epoch_regressions;
  peer_known_ = true;
  peer_id_ = h.node_id;
  peer_epoch_ = h.epoch;
  replay_.reset();
  // Expect the oldest sequence the peer can still resend: older ones are covered by the bulk
  // this node asks for.
  rwin_.reset(h.send_base == 0 ? 1 : h.send_base);
  tables_.peer_restarted();
  // A new epoch numbers its sequences from 1 again: they continue the count the store sees.
  delivered_base_ = delivered_;
  gaps_to_request_.clear();
  // Requests made of an earlier incarnation are never answered (it is gone, or ignores them).
  resync_asked_ = 0;
  resync_answered_ = 0;
  acks_owed_ = 0;
  ack_now_ = true;  // tell the peer at once where this node starts
  sack_now_ = false;
  ack_due_ = Micros::max();
  peer_keepalive_seen_ = false;
  peer_heard_epoch_ = 0;
  peer_heard_age_ms_ = 0xffffffff;
  peer_bulk_done_ = false;
  peer_rules_digest_ = 0;
  bulk_ended_ = 0;  // its transfer ids are its own
  // Tell the new peer at once that it is heard, so that it does not see a one-way link for a
  // keepalive interval.
  last_keepalive_ = now - config_.keepalive_interval;
  if (restart) {
    // The new incarnation asks for a bulk: everything meant for the old one is moot.
    ++counters_.peer_restarts;
    bulk_sending_ = false;
    bulk_send_request_ = 0;
    bulk_ids_.clear();
    backlog_taken_ += backlog_.size();
    backlog_.clear();
    resync_marks_.clear();
    controls_.clear();
    table_chunks_.clear();
    window_.clear_evicted();
    window_.blank_unacked();
    request_bulk(now);
  }
}

void SyncProtocol::set_keys(std::span<const uint8_t> key, std::span<const uint8_t> accept_key) {
  auth_ = std::make_unique<Authenticator>(key, accept_key);
}

void SyncProtocol::receive(std::span<const uint8_t> datagram, int ttl, Micros now) noexcept {
  if (!ttl_accepted(config_.ttl_security, ttl)) {
    ++counters_.drops[static_cast<std::size_t>(DropReason::BadTtl)];
    return;
  }
  Header h;
  std::span<const uint8_t> payload;
  DropReason why = DropReason::Truncated;
  if (!open(datagram, *auth_, h, payload, why)) {
    ++counters_.drops[static_cast<std::size_t>(why)];
    return;
  }
  bool new_epoch = false;
  if (!accept_sender(h, now, new_epoch)) return;
  if (new_epoch ? h.xmit == 0 : !replay_.check(h.xmit)) {
    ++counters_.drops[static_cast<std::size_t>(DropReason::Replay)];
    return;
  }
  const bool sequenced = (h.flags & frameflag::kSequenced) != 0;
  rx_batch_ = rx_arena_.fresh();
  // A sender still holds the sequence it sends: a send base past it would give up sequences never
  // sent, this datagram's own among them, and end the stream of the peer's epoch.
  if ((sequenced && (h.seq == 0 || h.send_base > h.seq)) ||
      (!payload.empty() && !rx_batch_->ParseFromArray(payload.data(), static_cast<int>(payload.size())))) {
    ++counters_.drops[static_cast<std::size_t>(DropReason::MalformedPayload)];
    return;
  }
  take_challenge(h, *rx_batch_, now);
  if (new_epoch && !proven(h, *rx_batch_, now)) {
    ++counters_.drops[static_cast<std::size_t>(DropReason::Unproven)];
    return;
  }
  if (new_epoch) start_peer_epoch(h, now);
  replay_.commit(h.xmit);
  ++counters_.datagrams_received;
  if (auth_->last_verified_by_also_accept()) ++counters_.datagrams_on_accept_key;
  counters_.bytes_received += datagram.size();
  // Heard again after the peer was down: tell it at once, so that it does not see a one-way link
  // for a keepalive interval.
  if (!new_epoch && now - last_heard_ > config_.dead_interval)
    last_keepalive_ = now - config_.keepalive_interval;
  last_heard_ = now;

  rx_ack_valid_ = (h.flags & frameflag::kAck) != 0 && h.ack_epoch == config_.epoch;
  rx_cum_ = h.cum_ack;
  if (rx_ack_valid_) {
    window_.on_ack(std::min(h.cum_ack, window_.next_seq() - 1), h.sack, now);
    advance_synced();
  }

  const uint8_t* const current = payload.data();
  auto on_deliver = [&](uint64_t seq, std::span<const uint8_t> p) {
    deliver(seq, p, !p.empty() && p.data() == current, now);
  };
  auto on_give_up = [&](uint64_t first, uint64_t last) { give_up(first, last); };
  rwin_.advance_to(h.send_base, on_deliver, on_give_up);
  if (!sequenced) {
    if (rx_batch_->messages_size() > 0) apply_batch(*rx_batch_, false, now);
    return;
  }
  if ((h.flags & frameflag::kAck) != 0 && h.ack_epoch != config_.epoch) {
    // The peer has not yet taken this boot for this node's (it is still proving it): what it sends
    // was made for the earlier boot, whose transfers' ends would end this one's bulk. Not held, so
    // the peer sends it again, emptied, once it knows (SendWindow::blank_unacked).
    ++counters_.drops[static_cast<std::size_t>(DropReason::EarlierBoot)];
    return;
  }
  switch (rwin_.accept(h.seq, payload, on_deliver)) {
    case ReceiveWindow::Accept::Delivered:
      if (++acks_owed_ >= config_.ack_every || (h.flags & frameflag::kAckNow) != 0) {
        ack_now_ = true;
      } else if (ack_due_ == Micros::max()) {
        ack_due_ = now + config_.ack_delay;
      }
      break;
    case ReceiveWindow::Accept::Held:
      // Out of order: ack at once, with the runs held, so the sender sees the hole (a duplicate
      // ack with SACK, RFC 5681 4.2 and RFC 2018).
      ++counters_.out_of_order;
      if (rwin_.held() == 1) ++counters_.holes;  // the first datagram past a new hole
      ack_now_ = true;
      sack_now_ = true;
      break;
    case ReceiveWindow::Accept::Duplicate:
      ++counters_.duplicates;
      ack_now_ = true;
      break;
    case ReceiveWindow::Accept::Beyond:
      ++counters_.beyond_window;
      ack_now_ = true;
      sack_now_ = true;
      break;
  }
}

void SyncProtocol::deliver(uint64_t seq, std::span<const uint8_t> payload, bool parsed, Micros now) {
  if (payload.empty()) return;
  delivered_ = delivered_base_ + seq;
  store_.set_peer_sequence(delivered_);
  rx_seq_ = seq;
  if (parsed) {
    apply_batch(*rx_batch_, true, now);
    return;
  }
  wire::Batch* held = held_arena_.fresh();
  if (!held->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    ++counters_.drops[static_cast<std::size_t>(DropReason::MalformedPayload)];
    return;
  }
  apply_batch(*held, true, now);
}

void SyncProtocol::apply_record(const engine::StateRecord& record, Micros now) {
  switch (store_.apply(record, now)) {
    case ApplyResult::Applied:
      ++counters_.applied;
      break;
    case ApplyResult::Stale:
      ++counters_.apply_stale;
      break;
    case ApplyResult::Failed:
      ++counters_.apply_failed;
      break;
    case ApplyResult::Invalid:
      ++counters_.drops[static_cast<std::size_t>(DropReason::MalformedPayload)];
      break;
    case ApplyResult::Unknown:
      ++counters_.apply_unknown;
      // An update for a state this node lacks: ask for the whole state (pfsync's update request),
      // unless a bulk that will bring it is under way. Rate-limited: a peer with a table this
      // node lost entirely is a full resync's job.
      if (record.kind != engine::StateRecord::Kind::Update || receiving(bulk_state_)) break;
      if (now - state_request_window_ >= Micros{1'000'000}) {
        state_request_window_ = now;
        state_requests_this_second_ = 0;
      }
      if (state_requests_this_second_ >= config_.state_requests_per_s) break;
      ++state_requests_this_second_;
      {
        wire::Message m;
        m.mutable_state_request()->set_creator(record.id.creator);
        m.mutable_state_request()->set_counter(record.id.counter);
        controls_.push_back(std::move(m));
      }
      ++counters_.state_requests_sent;
      break;
  }
}

void SyncProtocol::apply_batch(const wire::Batch& batch, bool sequenced, Micros now) {
  engine::StateRecord record;
  for (const wire::Message& m : batch.messages()) {
    ++counters_.messages_received;
    if (!sequenced && m.body_case() != wire::Message::kKeepalive && m.body_case() != wire::Message::kSack) {
      // Only keepalives and acks may travel unsequenced: anything else would bypass ordering.
      ++counters_.drops[static_cast<std::size_t>(DropReason::MalformedPayload)];
      continue;
    }
    switch (m.body_case()) {
      case wire::Message::kInsert:
        if (!decode_insert(m.insert(), record, store_.interfaces())) {
          ++counters_.drops[static_cast<std::size_t>(DropReason::MalformedPayload)];
          break;
        }
        if (m.insert().bulk() != 0 && m.insert().bulk() == bulk_transfer_ &&
            (bulk_state_ == BulkState::Receiving || bulk_state_ == BulkState::TimedOut)) {
          ++bulk_received_;
          ++counters_.bulk_states_received;
        }
        apply_record(record, now);
        break;
      case wire::Message::kUpdate:
        if (!decode_update(m.update(), record)) {
          ++counters_.drops[static_cast<std::size_t>(DropReason::MalformedPayload)];
          break;
        }
        apply_record(record, now);
        break;
      case wire::Message::kRemove:
        if (!decode_delete(m.remove(), record)) {
          ++counters_.drops[static_cast<std::size_t>(DropReason::MalformedPayload)];
          break;
        }
        apply_record(record, now);
        break;
      case wire::Message::kClear:
        record = engine::StateRecord{};
        record.kind = engine::StateRecord::Kind::Clear;
        record.id.creator = m.clear().creator();
        apply_record(record, now);
        break;
      case wire::Message::kBulkRequest:
        if (m.bulk_request().request() != 0 && m.bulk_request().request() < kUnsolicited) {
          serve_bulk(m.bulk_request().request(), now);
        }
        break;
      case wire::Message::kBulkStart:
        bulk_started(m.bulk_start().request(), m.bulk_start().count(), m.bulk_start().snapshot_seq(), now);
        break;
      case wire::Message::kBulkEnd:
        bulk_ended(m.bulk_end().request(), m.bulk_end().count());
        break;
      case wire::Message::kResyncRequest:
        serve_resync(m.resync_request(), now);
        break;
      case wire::Message::kResyncEnd:
        resync_ended(m.resync_end());
        break;
      case wire::Message::kStateRequest:
        if (m.state_request().counter() != 0) {
          backlog_.push_back({m.state_request().creator(), m.state_request().counter()});
        }
        break;
      case wire::Message::kKeepalive:
        peer_keepalive_seen_ = true;
        peer_keepalive_at_ = now;
        peer_heard_epoch_ = m.keepalive().heard_epoch();
        peer_heard_age_ms_ = m.keepalive().heard_age_ms();
        peer_bulk_done_ = m.keepalive().bulk_done();
        peer_rules_digest_ = m.keepalive().rules_digest();
        break;
      case wire::Message::kSack:
        if (!sequenced && rx_ack_valid_) {
          const auto& runs = m.sack().runs();
          window_.on_sack_runs(
              rx_cum_, std::span<const uint64_t>(runs.data(), static_cast<std::size_t>(runs.size())), now);
        }
        break;
      case wire::Message::kTableChunk: {
        SharedTable table;
        switch (tables_.receive(m.table_chunk(), now, table)) {
          case TableShare::Chunk::Partial:
            break;
          case TableShare::Chunk::Complete:
            ++counters_.tables_received;
            if (peer_table_) peer_table_(table);
            break;
          case TableShare::Chunk::Stale:
            ++counters_.table_chunks_stale;
            break;
          case TableShare::Chunk::Malformed:
            ++counters_.drops[static_cast<std::size_t>(DropReason::MalformedPayload)];
            break;
        }
        break;
      }
      case wire::Message::BODY_NOT_SET:
        ++counters_.messages_unknown;
        break;
    }
  }
}

void SyncProtocol::give_up(uint64_t first, uint64_t last) {
  ++counters_.gaps;
  counters_.gap_sequences += last - first + 1;
  if (!gaps_to_request_.empty() && gaps_to_request_.back().last + 1 == first) {
    gaps_to_request_.back().last = last;
  } else {
    gaps_to_request_.push_back({first, last});
  }
}

void SyncProtocol::serve_bulk(uint32_t request, Micros now) {
  (void)now;
  // A request seen again (its datagram was resent after a lost ack) is the same transfer.
  if (request == bulk_send_request_ && request < kUnsolicited) return;
  bulk_ids_.clear();
  store_.collect_ids(bulk_ids_);
  tables_.send_all(now);
  bulk_pos_ = 0;
  bulk_sent_ = 0;
  bulk_sending_ = true;
  bulk_send_request_ = request;
  wire::Message m;
  m.mutable_bulk_start()->set_request(request);
  m.mutable_bulk_start()->set_count(bulk_ids_.size());
  // Every state this node holds is named from the next sequence on, by its bulk insert or by the
  // live insert of a newer one. Said only once the table is whole: a node whose initial bulk is
  // under way, or timed out, may lack states it created before a restart, which the peer must
  // keep. (A transfer it receives later, a full resync, or its bulk from a restarted peer, takes
  // none of its own states away.)
  m.mutable_bulk_start()->set_snapshot_seq(table_whole_ ? window_.next_seq() : 0);
  controls_.push_back(std::move(m));
  if (request < kUnsolicited) ++counters_.bulks_served;
}

void SyncProtocol::serve_resync(const wire::ResyncRequest& request, Micros now) {
  if (request.epoch() != config_.epoch) {
    ++counters_.resync_requests_stale;
    return;
  }
  ++counters_.resync_requests_served;
  bool full = false;
  std::vector<engine::StateId> ids;
  std::string controls;
  wire::Batch requeue;
  const uint64_t last_sent = window_.next_seq() - 1;
  for (const wire::SeqRange& range : request.ranges()) {
    if (range.first() == 0 || range.first() > range.last()) continue;
    const uint64_t last = std::min(range.last(), last_sent);
    for (uint64_t seq = range.first(); seq <= last; ++seq) {
      controls.clear();
      switch (window_.take_for_resync(seq, ids, controls)) {
        case SendWindow::Lookup::Found:
          if (!controls.empty() && requeue.ParseFromString(controls)) {
            for (const wire::Message& m : requeue.messages()) {
              // A BulkStart is worth sending again only while its transfer is being sent: after
              // its end, or once another transfer took its place, it would open one that never
              // ends.
              if (m.has_bulk_start() && (!bulk_sending_ || m.bulk_start().request() != bulk_send_request_))
                continue;
              controls_.push_back(m);
            }
          }
          break;
        case SendWindow::Lookup::Acked:
          break;
        case SendWindow::Lookup::Forgotten:
          full = true;
          break;
      }
    }
  }
  // A lost clear cannot be replayed out of order (it would remove states inserted after it); its
  // id marker (counter 0) asks for a full resync instead.
  for (const auto& id : ids) full = full || id.counter == 0;
  if (full) {
    ++counters_.full_resyncs_started;
    backlog_taken_ += backlog_.size();
    backlog_.clear();
    serve_bulk(kUnsolicited | (static_cast<uint32_t>(counters_.full_resyncs_started) & ~kUnsolicited), now);
  } else {
    for (const auto& id : ids) backlog_.push_back(id);
  }
  // Said once the backlog is sent up to here (a full resync's BulkStart goes before it, as a
  // control): the peer may be waiting for it to take its bulk as done.
  resync_marks_.push_back({backlog_taken_ + backlog_.size(), peer_epoch_, rx_seq_});
}

void SyncProtocol::bulk_started(uint32_t request, uint64_t count, uint64_t snapshot_seq, Micros now) {
  const bool unsolicited = (request & kUnsolicited) != 0;
  if (!unsolicited && request != bulk_request_) return;  // an older request's transfer
  // Seen before, or its end came first (bulk_ended): then this is a copy a resync sent again.
  const bool receiving_it = request == bulk_transfer_ &&
                            (bulk_state_ == BulkState::Receiving || bulk_state_ == BulkState::TimedOut);
  if (receiving_it || request == bulk_ended_) return;
  if (unsolicited) ++counters_.full_resyncs_received;
  bulk_transfer_ = request;
  bulk_state_ = BulkState::Receiving;
  bulk_expected_ = count;
  bulk_received_ = 0;
  bulk_snapshot_seq_ = snapshot_seq == 0 ? 0 : delivered_base_ + snapshot_seq;
  bulk_gaps_ = counters_.gaps;
  // Capped before it becomes an integer: a count no table holds (a peer's broken code) would
  // overflow it, and a deadline in the past ends this node's demotion before any state came.
  const double allowance_us = static_cast<double>(count) / config_.bulk_min_rate * 1e6;
  const Micros allowance = allowance_us < static_cast<double>(kMaxBulkAllowance.count())
                               ? Micros{static_cast<int64_t>(allowance_us)}
                               : kMaxBulkAllowance;
  bulk_deadline_ = now + config_.bulk_timeout_min + allowance;
}

void SyncProtocol::bulk_ended(uint32_t request, uint64_t count) {
  if (request == 0) return;
  if (request != bulk_transfer_) {
    // The end of a transfer whose BulkStart has not come: the datagram that carried it was given
    // up, and its resync comes after this end (with the BulkStart only if the peer was still
    // sending the transfer then). The transfer's states were all sent, those of the datagrams
    // given up with their resync. A node waiting for its bulk takes the transfer as its BulkStart
    // would have (this node's request, or a full resync that took its place) and ends it here,
    // without removing anything (its snapshot is unknown); a BulkStart that comes later opens
    // nothing.
    const bool unsolicited = (request & kUnsolicited) != 0;
    if (!unsolicited && request != bulk_request_) return;  // an older request's transfer
    // The transfer being received has ended and waits for the resyncs of its gaps: this one took
    // its place at the sender after that end, and the resyncs it needs are waited for alike.
    if (bulk_state_ == BulkState::Receiving && bulk_ended_ == bulk_transfer_) return;
    bulk_ended_ = request;
    if (bulk_state_ != BulkState::Requested && bulk_state_ != BulkState::TimedOut) return;
    if (unsolicited) ++counters_.full_resyncs_received;
    bulk_transfer_ = request;
    bulk_received_ = 0;
    bulk_snapshot_seq_ = 0;
    if (bulk_state_ == BulkState::Requested) bulk_state_ = BulkState::Receiving;
  } else if (bulk_state_ != BulkState::Receiving && bulk_state_ != BulkState::TimedOut) {
    return;
  }
  bulk_ended_ = request;
  bulk_end_count_ = count;
  finish_bulk();
}

void SyncProtocol::resync_ended(const wire::ResyncEnd& end) {
  if (end.epoch() != config_.epoch) {
    ++counters_.resync_requests_stale;
    return;
  }
  resync_answered_ = std::max(resync_answered_, end.through());
  finish_bulk();
}

// The transfer being received is done once its BulkEnd came and every resync this node asked for
// is answered: the states of the datagrams it gave up during the transfer come in those resyncs,
// after the end, and a node that took its table as whole before then (and was made master) would
// cut the connections they carry. Past the transfer's deadline it waits no longer (poll()).
void SyncProtocol::finish_bulk() {
  if (bulk_ended_ == 0 || bulk_ended_ != bulk_transfer_) return;
  if (bulk_state_ != BulkState::Receiving && bulk_state_ != BulkState::TimedOut) return;
  if (!gaps_to_request_.empty() || resync_answered_ < resync_asked_) return;
  bulk_state_ = BulkState::Done;
  bulk_deadline_ = Micros::max();
  initial_bulk_done_ = true;
  table_whole_ = true;
  // Only a transfer that arrived whole names every state the peer holds; without a snapshot
  // sequence the peer's table was not complete (its own bulk had not ended). The inserts it lacks
  // for gaps given up since its start are made up for: the resyncs of those gaps, all in by now,
  // named each state the lost datagrams carried again, from a later sequence (or removed it).
  const bool whole =
      bulk_received_ == bulk_end_count_ || (bulk_received_ < bulk_end_count_ && counters_.gaps > bulk_gaps_);
  if (whole && bulk_snapshot_seq_ != 0 && peer_id_ != 0) {
    counters_.peer_states_removed += store_.remove_peer_states_unnamed_since(peer_id_, bulk_snapshot_seq_);
  }
}

// ---------------------------------------------------------------------------------------------
// Sending.

bool SyncProtocol::has_background() const noexcept {
  return !table_chunks_.empty() || !backlog_.empty() || !resync_marks_.empty() || bulk_sending_;
}

bool SyncProtocol::controls_waiting() const noexcept {
  return !controls_.empty() || !gaps_to_request_.empty();
}

bool SyncProtocol::flush_due(Micros now) const noexcept {
  if (!controls_.empty() || !gaps_to_request_.empty() || pending_.urgent()) return true;
  return !pending_.empty() && now - pending_.oldest() >= config_.flush_interval;
}

Header SyncProtocol::make_header(uint64_t seq) noexcept {
  Header h;
  h.flags = seq != 0 ? frameflag::kSequenced : 0;
  h.node_id = config_.node_id;
  h.epoch = config_.epoch;
  h.xmit = ++xmit_;
  h.seq = seq;
  h.send_base = window_.send_base();
  if (peer_known_) {
    h.flags |= frameflag::kAck;
    h.ack_epoch = peer_epoch_;
    h.cum_ack = rwin_.base();
    h.sack = rwin_.sack_bits(h.cum_ack);
  }
  return h;
}

void SyncProtocol::transmit(uint64_t seq, std::span<const uint8_t> payload, Micros now, const SendFn& send,
                            uint8_t flags) {
  (void)now;
  Header h = make_header(seq);
  h.flags |= flags;
  const std::size_t n = seal(h, payload, *auth_, out_);
  if (n == 0) {
    ++counters_.send_errors;
    ack_now_ = false;  // owed still, but not by a poll() that would fail the same way at once
    return;
  }
  if (send(std::span<const uint8_t>(out_.data(), n))) {
    ++counters_.datagrams_sent;
    counters_.bytes_sent += n;
  } else {
    ++counters_.send_errors;
  }
  if (peer_known_) {
    acks_owed_ = 0;
    ack_now_ = false;
    ack_due_ = Micros::max();
  }
}

bool SyncProtocol::add_message(const std::function<void(wire::Message*)>& fill) {
  wire::Message* m = tx_batch_->add_messages();
  fill(m);
  const std::size_t size = m->ByteSizeLong();
  const std::size_t cost = 1 + varint_size(size) + size;
  if (tx_used_ + cost > tx_budget_) {
    tx_batch_->mutable_messages()->RemoveLast();
    return false;
  }
  tx_used_ += cost;
  ++counters_.messages_sent;
  return true;
}

bool SyncProtocol::send_data(Micros now, bool live, bool background, const SendFn& send) {
  tx_batch_ = tx_arena_.fresh();
  tx_controls_ = tx_arena_.another();
  tx_ids_.clear();
  tx_used_ = 0;
  tx_inserts_ = false;
  bool asks_resync = false;

  while (!controls_.empty()) {
    const wire::Message& c = controls_.front();
    if (!add_message([&](wire::Message* m) { *m = c; })) {
      if (tx_batch_->messages_size() > 0) break;
      controls_.pop_front();  // cannot fit any datagram: a bug, counted rather than looping
      ++counters_.send_errors;
      continue;
    }
    *tx_controls_->add_messages() = c;
    asks_resync = asks_resync || c.has_resync_request();
    controls_.pop_front();
  }
  if (controls_.empty() && !gaps_to_request_.empty()) {
    const std::size_t room = tx_budget_ > tx_used_ + 16 ? (tx_budget_ - tx_used_ - 16) / kRangeBytes : 0;
    const std::size_t n = std::min(room, gaps_to_request_.size());
    if (n > 0 && add_message([&](wire::Message* m) {
          auto* req = m->mutable_resync_request();
          req->set_epoch(peer_epoch_);
          for (std::size_t i = 0; i < n; ++i) {
            auto* r = req->add_ranges();
            r->set_first(gaps_to_request_[i].first);
            r->set_last(gaps_to_request_[i].last);
          }
        })) {
      *tx_controls_->add_messages() = tx_batch_->messages(tx_batch_->messages_size() - 1);
      gaps_to_request_.erase(gaps_to_request_.begin(),
                             gaps_to_request_.begin() + static_cast<std::ptrdiff_t>(n));
      asks_resync = true;
      ++counters_.resync_requests_sent;
    }
  }
  const bool controls_done = controls_.empty() && gaps_to_request_.empty();

  if (live && controls_done) {
    using Kind = engine::StateRecord::Kind;
    while (!pending_.empty()) {
      const engine::StateRecord& r = pending_.front();
      const bool ok = add_message([&](wire::Message* m) {
        switch (r.kind) {
          case Kind::Insert:
            encode_insert(r, 0, m->mutable_insert(), store_.interfaces());
            break;
          case Kind::Update:
            encode_update(r, m->mutable_update());
            break;
          case Kind::Delete:
            encode_delete(r.id, m->mutable_remove());
            break;
          case Kind::Clear:
            m->mutable_clear()->set_creator(r.id.creator);
            break;
        }
      });
      if (!ok) break;
      tx_inserts_ = tx_inserts_ || r.kind == Kind::Insert;
      // A clear is marked by counter 0: if its datagram is lost beyond resending, only a full
      // resync is correct.
      tx_ids_.push_back(r.kind == Kind::Clear ? engine::StateId{r.id.creator, 0} : r.id);
      pending_.pop_front();
    }
  }

  if (background && controls_done && (!live || pending_.empty())) {
    // A chunk goes with the controls of its datagram too, so that a resync sends it again: its
    // version is still the newest, or the peer finds it stale.
    while (!table_chunks_.empty()) {
      const wire::Message& chunk = table_chunks_.front();
      if (!add_message([&](wire::Message* m) { *m = chunk; })) {
        if (tx_batch_->messages_size() > 0) break;
        // Cut for a larger datagram than a reload's mtu now allows: cut again.
        table_chunks_.clear();
        tables_.send_all(now);
        ++counters_.send_errors;
        break;
      }
      *tx_controls_->add_messages() = chunk;
      table_chunks_.pop_front();
      ++counters_.table_chunks_sent;
    }
    engine::StateRecord r;
    while (!backlog_.empty()) {
      const engine::StateId id = backlog_.front();
      const bool exists = store_.current(id, now, r);
      const bool ok = add_message([&](wire::Message* m) {
        if (exists) {
          encode_insert(r, 0, m->mutable_insert(), store_.interfaces());
        } else {
          encode_delete(id, m->mutable_remove());
        }
      });
      if (!ok) break;
      tx_ids_.push_back(id);
      backlog_.pop_front();
      ++backlog_taken_;
      ++counters_.resync_states_sent;
    }
    // One ResyncEnd says it for every request answered so far.
    std::size_t answered = 0;
    while (answered < resync_marks_.size() && resync_marks_[answered].backlog_end <= backlog_taken_)
      ++answered;
    if (answered > 0) {
      const ResyncMark& last = resync_marks_[answered - 1];
      if (add_message([&](wire::Message* m) {
            m->mutable_resync_end()->set_through(last.through);
            m->mutable_resync_end()->set_epoch(last.epoch);
          })) {
        resync_marks_.erase(resync_marks_.begin(),
                            resync_marks_.begin() + static_cast<std::ptrdiff_t>(answered));
      }
    }
    if (backlog_.empty() && bulk_sending_) {
      bool full = false;
      while (bulk_pos_ < bulk_ids_.size()) {
        const engine::StateId id = bulk_ids_[bulk_pos_];
        if (!store_.current(id, now, r)) {
          ++bulk_pos_;  // gone since the snapshot
          continue;
        }
        if (!add_message([&](wire::Message* m) {
              encode_insert(r, bulk_send_request_, m->mutable_insert(), store_.interfaces());
            })) {
          full = true;
          break;
        }
        tx_ids_.push_back(id);
        ++bulk_pos_;
        ++bulk_sent_;
        ++counters_.bulk_states_sent;
      }
      if (!full && bulk_pos_ == bulk_ids_.size()) {
        wire::Message end;
        end.mutable_bulk_end()->set_request(bulk_send_request_);
        end.mutable_bulk_end()->set_count(bulk_sent_);
        if (add_message([&](wire::Message* m) { *m = end; })) {
          *tx_controls_->add_messages() = end;
        } else {
          controls_.push_back(std::move(end));
        }
        bulk_sending_ = false;
        std::vector<engine::StateId>().swap(bulk_ids_);
      }
    }
  }

  if (tx_batch_->messages_size() == 0) return false;
  std::vector<uint8_t> payload(tx_batch_->ByteSizeLong());
  tx_batch_->SerializeWithCachedSizesToArray(payload.data());
  std::string controls;
  if (tx_controls_->messages_size() > 0) tx_controls_->SerializeToString(&controls);
  const uint64_t seq = window_.push(std::move(payload), tx_ids_, std::move(controls), now);
  if (asks_resync) resync_asked_ = seq;
  const bool ack_now = tx_inserts_ && config_.ack_inserts_at_once;
  transmit(seq, window_.slot(seq).payload, now, send, ack_now ? frameflag::kAckNow : 0);
  return true;
}

void SyncProtocol::mark_sent() noexcept {
  if (!pending_.empty() || marked_ == enqueued_) return;
  marked_ = enqueued_;
  if (marks_.size() == kMaxMarks) marks_.pop_front();
  marks_.push_back({enqueued_, window_.next_seq() - 1});
  advance_synced();
}

void SyncProtocol::advance_synced() noexcept {
  // send_base() is the oldest sequence not yet acked: every one below it was.
  while (!marks_.empty() && marks_.front().seq < window_.send_base()) {
    synced_ = marks_.front().enqueued;
    marks_.pop_front();
  }
}

void SyncProtocol::send_unsequenced(bool keepalive, Micros now, const SendFn& send) {
  tx_payload_.clear();
  wire::Batch batch;
  if (peer_known_ && rwin_.held() > 0) {
    rwin_.held_runs(rwin_.base(), kMaxSackRuns, sack_runs_);
    auto* sack = batch.add_messages()->mutable_sack();
    for (uint64_t r : sack_runs_) sack->add_runs(r);
  }
  sack_now_ = false;
  if (keepalive) {
    auto* k = batch.add_messages()->mutable_keepalive();
    k->set_heard_epoch(peer_known_ ? peer_epoch_ : 0);
    const int64_t age_ms = peer_known_ ? (now - last_heard_).count() / 1000 : -1;
    k->set_heard_age_ms(age_ms < 0 || age_ms > 0xfffffffe ? 0xffffffff : static_cast<uint32_t>(age_ms));
    k->set_interval_ms(static_cast<uint32_t>(config_.keepalive_interval.count() / 1000));
    k->set_bulk_done(initial_bulk_done_);
    k->set_rules_digest(store_.rules_digest());
    k->set_challenge(challenge_.nonce);
    k->set_answer(answer_);
    last_keepalive_ = now;
    ++counters_.keepalives_sent;
  } else {
    ++counters_.acks_sent;
  }
  // Runs past what the datagram holds are left out: the peer learns of the later holes from a
  // later ack. (512 one-byte runs alone fill a 576-byte link's datagram.)
  if (batch.messages_size() > 0 && batch.messages(0).has_sack()) {
    auto* runs = batch.mutable_messages(0)->mutable_sack()->mutable_runs();
    while (!runs->empty() && batch.ByteSizeLong() > tx_budget_) runs->RemoveLast();
  }
  if (batch.messages_size() > 0) {
    tx_payload_.resize(batch.ByteSizeLong());
    batch.SerializeWithCachedSizesToArray(tx_payload_.data());
  }
  transmit(0, tx_payload_, now, send);
}

void SyncProtocol::poll(Micros now, const SendFn& send) noexcept {
  if (receiving(bulk_state_) && now >= bulk_deadline_) {
    // pfsync's "bulk update failed" with a deadline from the count: never demoted for ever.
    bulk_state_ = BulkState::TimedOut;
    bulk_deadline_ = Micros::max();
    initial_bulk_done_ = true;
    ++counters_.bulk_timeouts;
  }

  if (full_resync_owed_ && peer_state(now) != PeerState::Down) {
    full_resync_owed_ = false;
    ++counters_.full_resyncs_started;
    serve_bulk(kUnsolicited | (static_cast<uint32_t>(counters_.full_resyncs_started) & ~kUnsolicited), now);
  }

  window_.check_timer(now);
  while (window_.has_lost() && window_.cwnd_open()) {
    const uint64_t seq = window_.next_lost();
    if (seq == 0) break;
    window_.resent(seq, now);
    ++counters_.resends;
    transmit(seq, window_.slot(seq).payload, now, send);
  }

  // Controls go out whatever the window: they are few, and bulks and resyncs wait for them.
  while (controls_waiting() && send_data(now, window_.cwnd_open(), window_.cwnd_open(), send)) {
  }
  // Live records when the flush is due or a datagram's worth waits, paced by the window: a peer
  // that cannot keep up (or a dead link) makes them wait here, coalescing per state, instead of
  // overflowing its socket buffer and the resend window.
  const bool due = flush_due(now);
  while (window_.cwnd_open() && !pending_.empty() && (due || pending_.estimated_bytes() >= tx_budget_) &&
         send_data(now, true, true, send)) {
  }
  // One version of each table at a time waits for the window: changes meanwhile (a link down for
  // long) fold into the next.
  if (initial_bulk_done_ && table_chunks_.empty() && tables_.next_due() <= now)
    counters_.tables_sent += tables_.take_due(now, tx_budget_, table_chunks_);
  while (has_background() && window_.cwnd_open() && send_data(now, false, true, send)) {
  }
  mark_sent();

  if (peer_known_ && (ack_now_ || sack_now_ || now >= ack_due_)) send_unsequenced(false, now, send);
  if (now - last_keepalive_ >= config_.keepalive_interval) send_unsequenced(true, now, send);

  counters_.window_evictions = window_.evictions();
  counters_.evicted_ids_dropped = window_.evicted_ids_dropped();
  counters_.rto_expirations = window_.rto_expirations();
}

void SyncProtocol::flush(Micros now, const SendFn& send) noexcept {
  while (window_.cwnd_open() && !pending_.empty() && send_data(now, true, true, send)) {
  }
  mark_sent();
}

Micros SyncProtocol::next_deadline(Micros now) const noexcept {
  if ((peer_known_ && (ack_now_ || sack_now_)) || controls_waiting()) return now;
  Micros d = last_keepalive_ + config_.keepalive_interval;
  // With the window closed, what waits for it is sent when an ack opens it (receive() then
  // poll()), or when the resend timer fires.
  if (window_.cwnd_open()) {
    if (window_.has_lost() || has_background() || pending_.urgent() ||
        pending_.estimated_bytes() >= tx_budget_) {
      return now;
    }
    if (!pending_.empty()) d = std::min(d, pending_.oldest() + config_.flush_interval);
  }
  if (peer_known_) {
    d = std::min(d, ack_due_);
    d = std::min(d, last_heard_ + config_.dead_interval + Micros{1});
  }
  d = std::min(d, window_.timer_deadline());
  if (receiving(bulk_state_)) d = std::min(d, bulk_deadline_);
  if (initial_bulk_done_ && table_chunks_.empty()) d = std::min(d, tables_.next_due());
  return std::max(d, now);
}

PeerState SyncProtocol::peer_state(Micros now) const noexcept {
  if (!peer_known_ || now - last_heard_ > config_.dead_interval) return PeerState::Down;
  // A keepalive may be one interval older than the last datagram heard: allow for it, or every
  // link failure would pass through a spurious one-way state.
  const bool heard_by_peer = peer_keepalive_seen_ &&
                             now - peer_keepalive_at_ <= config_.dead_interval + config_.keepalive_interval &&
                             peer_heard_epoch_ == config_.epoch &&
                             Micros{int64_t{peer_heard_age_ms_} * 1000} <= config_.dead_interval;
  return heard_by_peer ? PeerState::Up : PeerState::OneWay;
}

void SyncProtocol::retune(const Tuning& t) {
  config_.flush_interval = t.flush_interval;
  config_.bulk_timeout_min = t.bulk_timeout_min;
  config_.pending_limit = t.pending_limit;
  config_.peer_node_id = t.peer_node_id;
  window_.set_capacity(t.resend_window);
  rwin_.grow(t.receive_window);
}

void SyncProtocol::set_max_datagram(std::size_t bytes) {
  // A datagram is built and sent within one send_data(): none is half filled between two calls.
  config_.max_datagram = std::clamp(bytes, kMinDatagram, kMaxPayload + kOverhead);
  tx_budget_ = config_.max_datagram - kOverhead;
}

ProtocolStatus SyncProtocol::status(Micros now) const {
  ProtocolStatus s;
  s.peer_state = peer_state(now);
  s.node_id = config_.node_id;
  s.epoch = config_.epoch;
  s.peer_node_id = peer_known_ ? peer_id_ : 0;
  s.peer_epoch = peer_epoch_;
  s.peer_heard = peer_known_;
  s.last_heard_age = peer_known_ ? now - last_heard_ : Micros{0};
  s.peer_bulk_done = peer_bulk_done_;
  s.rules_digest = store_.rules_digest();
  s.peer_rules_digest = peer_rules_digest_;
  s.bulk_state = bulk_state_;
  s.bulk_done = initial_bulk_done_;
  s.bulk_request = bulk_transfer_ != 0 ? bulk_transfer_ : bulk_request_;
  s.bulk_end_count = bulk_end_count_;
  s.max_datagram = config_.max_datagram;
  s.bulk_expected = bulk_expected_;
  s.bulk_received = bulk_received_;
  s.bulk_sending = bulk_sending_;
  s.bulk_send_total = bulk_sending_ ? bulk_ids_.size() : 0;
  s.bulk_send_done = bulk_sending_ ? bulk_pos_ : 0;
  s.pending_records = pending_.size();
  s.backlog = backlog_.size();
  s.outstanding = window_.outstanding();
  s.in_flight = window_.in_flight();
  s.cwnd = window_.cwnd();
  s.srtt = window_.srtt();
  s.rto = window_.rto();
  s.evicted_ids = window_.evicted_ids();
  s.held = rwin_.held();
  s.counters = counters_;
  return s;
}

}  // namespace pairwall::sync
