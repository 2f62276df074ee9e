// Which verdict messages to send for a run of decided queue packets.
//
// The kernel numbers the packets of one queue in order, and NFQNL_MSG_VERDICT_BATCH with id N
// settles every packet still queued with an id up to N. So a run of plain accepts collapses into
// one batch message sent when the run ends; a drop or an accept carrying rewritten bytes needs a
// message of its own (the batch has no payload, and it must not accept a packet to be dropped),
// and it ends the run before it, as does a claimed accept, which carries a mark of its own.
// Messages are sent in the order planned, which the kernel keeps.
//
// Precondition for batching: every lower id still in the queue has been decided by the time its
// run is flushed. A held packet (defer_queue.h), whose verdict comes later, ends the run before
// it, and while any packet is held every accept is a message of its own.
#pragma once

#include <cstdint>

namespace pairwall::io {

// Claimed: accepted before routing by the engine, which marks it (QueueConfig::claim_mark) so that
// the hooks after routing let it by. Held: decided, but settled later (NfqSocket::settle_held).
enum class Decision : uint8_t { Accept, AcceptRewritten, Drop, AcceptClaimed, AcceptRewrittenClaimed, Held };

inline bool rewritten(Decision d) {
  return d == Decision::AcceptRewritten || d == Decision::AcceptRewrittenClaimed;
}
inline bool claimed(Decision d) {
  return d == Decision::AcceptClaimed || d == Decision::AcceptRewrittenClaimed;
}

struct VerdictOp {
  enum class Kind : uint8_t { Single, Batch };
  Kind kind = Kind::Single;
  uint32_t id = 0;
  bool accept = true;         // NF_ACCEPT, else NF_DROP
  bool with_payload = false;  // NF_ACCEPT with NFQA_PAYLOAD (the rewritten packet)
  bool claimed = false;       // with NFQA_MARK (the claim mark)
  uint32_t mark = 0;          // claimed: the mark the packet came with, which it keeps
  friend bool operator==(const VerdictOp&, const VerdictOp&) = default;
};

// At most two messages result from one decision: the run it ends, and its own.
struct VerdictSteps {
  VerdictOp ops[2];
  uint8_t count = 0;
  void push(const VerdictOp& op) noexcept { ops[count++] = op; }
};

class VerdictPlanner {
 public:
  // `batch` false: one message per packet (the baseline the batching is measured against).
  explicit VerdictPlanner(bool batch) : batch_(batch) {}

  // `mark`: the packet's, for a claimed decision.
  VerdictSteps add(uint32_t id, Decision decision, uint32_t mark = 0) noexcept {
    VerdictSteps steps;
    if (decision == Decision::Accept && batch_ && held_ == 0) {
      run_last_ = id;
      ++run_length_;
      return steps;
    }
    close_run(steps);
    steps.push({VerdictOp::Kind::Single, id, decision != Decision::Drop, rewritten(decision),
                claimed(decision), claimed(decision) ? mark : 0});
    return steps;
  }

  // A packet held for a later verdict: it ends the run before it, and no batch may settle it.
  VerdictSteps hold() noexcept {
    VerdictSteps steps;
    close_run(steps);
    ++held_;
    return steps;
  }
  // A held packet's verdict is sent. Signed: a packet may be released (when the hold queue makes
  // room) before its own decision is planned.
  void released() noexcept { --held_; }
  int64_t held() const noexcept { return held_; }

  // Ends the current run of accepts; call before blocking for more packets.
  VerdictSteps flush() noexcept {
    VerdictSteps steps;
    close_run(steps);
    return steps;
  }

  bool pending() const noexcept { return run_length_ != 0; }

 private:
  void close_run(VerdictSteps& steps) noexcept {
    if (run_length_ == 0) return;
    // A run of one is a plain verdict: it settles exactly that packet and nothing else.
    steps.push(
        {run_length_ == 1 ? VerdictOp::Kind::Single : VerdictOp::Kind::Batch, run_last_, true, false, false});
    run_length_ = 0;
  }

  bool batch_;
  int64_t held_ = 0;
  uint32_t run_last_ = 0;
  uint32_t run_length_ = 0;
};

}  // namespace pairwall::io
