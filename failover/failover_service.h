// The failover service of pairwalld: one failover group on a Boost.Asio io_context.
//
// It feeds the election (failover/election.h) with what the kernel and the peer say —
// advertisements from the multicast sockets, carrier from rtnetlink, the demotion inputs polled
// from the sync service and the engine — and carries out what the election decides: VIPs added or
// removed by netlink, advertisements sent, gratuitous ARP / unsolicited NA bursts.
//
// With driver "keepalived" nothing is advertised and no VIP is touched: keepalived runs VRRP and
// owns its virtual_ipaddress; its notify scripts report the role (set-role) and its track_script
// asks healthy(), which fails while this node is demoted.
//
// Threading: handlers run on the io_context; the control calls may come from another thread and
// take the same mutex. pairwalld gives the service an io_context and a thread of its own, so that
// nothing its control loop does delays an advertisement. Nothing here is on the packet path.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/control/control_api.h"
#include "failover/advert_codec.h"
#include "failover/demotion.h"
#include "failover/election.h"
#include "failover/failover_config.h"
#include "failover/link_watch.h"
#include "failover/role_script.h"
#include "failover/vip_upkeep.h"

namespace pairwall::failover {

class AdvertSocket;
class Announcer;
class VipSet;

struct FailoverHooks {
  // Polled on the io_context every kPollInterval; an empty function means "complete" / "healthy".
  std::function<bool()> bulk_sync_complete;  // false while the bulk resync from the peer runs
  std::function<bool()> engine_healthy;      // false while the engine does not serve its queues
};

struct FailoverCounters {
  uint64_t adverts_sent = 0;  // datagrams: one advertisement goes out on every interface and family
  uint64_t advert_send_errors = 0;
  uint64_t adverts_accepted = 0;
  uint64_t adverts_on_accept_key = 0;  // of those, signed with accept_key: the sender signs with it
  uint64_t announcements = 0;          // frames (one per VIP per burst step)
  uint64_t announce_errors = 0;
  uint64_t vip_renewals = 0;
  uint64_t vip_retries = 0;  // adds and removals tried again after one failed
  uint64_t vip_errors = 0;
  uint64_t worse_masters = 0;  // see Election::worse_masters()
  uint64_t node_id_conflicts = 0;
  uint64_t link_resyncs = 0;
  uint64_t advert_socket_retries = 0;  // opens tried again after one failed, while the link has carrier
  uint64_t notify_runs = 0;            // [failover] notify scripts started (RoleScript)
  uint64_t notify_failures = 0;        // not started, or ended other than with exit status 0
};

struct FailoverSnapshot {
  struct TransitionView {
    Time at{0};  // CLOCK_MONOTONIC, microseconds
    int64_t unix_ms = 0;
    Role from = Role::Init;
    Role to = Role::Init;
    std::string cause;
    uint32_t peer = 0;
  };
  struct LinkView {
    std::string name;
    bool carrier = false;
    bool tracked = false;  // in track_interfaces, holding no VIP
  };

  Driver driver = Driver::Builtin;
  uint32_t node_id = 0;
  Role role = Role::Init;
  uint8_t vhid = 0;
  uint32_t advbase_ms = 0;
  uint8_t advskew = 0;
  bool preempt = false;
  uint32_t demotion = 0;
  std::vector<std::string> demotion_reasons;
  std::array<uint32_t, kDemoteReasonCount> demotion_by_reason{};  // indexed by DemoteReason
  Time now{0};
  std::optional<PeerSeen> peer;  // the last master heard
  int64_t last_heard_ms_ago = -1;
  // Since healthy() was last asked, -1 never: in keepalived mode, keepalived's vrrp_script asks
  // every interval, so an age of many intervals says keepalived is not running.
  int64_t health_checked_ms_ago = -1;
  uint32_t master_node_id = 0;  // 0: no master known
  bool vips_held = false;
  std::vector<std::string> vips;
  std::vector<LinkView> links;
  std::vector<std::string> advertisements;  // AdvertChannel::text() of each open or opening channel
  std::string notify;
  std::vector<TransitionView> transitions;  // oldest first, the last TransitionLog::kCapacity
  uint64_t transitions_total = 0;
  std::array<uint64_t, kRejectCount> rejects{};
  FailoverCounters counters;
};

// keepalived reports a role only as it changes; a pairwalld (re)started under it takes the role
// from the VIPs `present` of `total`, which keepalived holds as master alone: all MASTER, none
// BACKUP. Some, or an unknown count (the addresses could not be read): none, INIT until
// keepalived's next word.
std::optional<Role> role_from_vips(std::optional<std::size_t> present, std::size_t total);

class FailoverService final : public control::FailoverControl {
 public:
  static constexpr Time kPollInterval = std::chrono::milliseconds(50);
  // An advertisement socket whose open failed while its link has carrier (a transient error, the
  // interface renamed in between) is tried again after this, until it opens or the link loses
  // carrier: otherwise the node would neither hear nor send advertisements on that link until its
  // carrier changed. Carrier coming back reopens every socket of the link at once.
  static constexpr Time kSocketRetryInterval = std::chrono::seconds(1);

  // `boot_epoch`: this start's epoch (control/boot_epoch.h); 0 takes the wall clock.
  FailoverService(boost::asio::io_context& io, FailoverConfig config, uint32_t node_id,
                  FailoverHooks hooks = {}, uint64_t boot_epoch = 0);
  ~FailoverService() override;
  FailoverService(const FailoverService&) = delete;
  FailoverService& operator=(const FailoverService&) = delete;

  // Opens the sockets, removes VIPs a previous run may have left (kill -9), reads carrier and
  // starts the election as backup. Throws std::system_error / std::runtime_error with a message
  // naming what failed.
  void start();
  // The same with the carrier watch over `links` instead of an rtnetlink socket of its own.
  void start(LinkWatch::Transport links);
  // Clean shutdown: a master sends its leaving advertisement and releases the VIPs. Call on the
  // io_context's thread (or after it stopped).
  void stop();

  FailoverSnapshot snapshot() const;
  // The keys a SIGHUP re-read (key_file, accept_key_file): advertisements are signed with `key`
  // from the next one on, and accepted under either. Any thread.
  void set_keys(std::string key, std::string accept_key);
  // What a reload (SIGHUP, `pairwalld --reload`) changes on a running group, taken as carp(4)
  // takes `ifconfig carpN vhid N advskew N advbase N [-]preempt` and its addresses: vhid (the
  // advertisements sent and accepted from then on), advskew and preempt
  // (Election::set_preference), advbase_ms (Election::set_advbase; the automatic announcement
  // interval and VIP lease follow it), announce_count, announce_interval_ms, vip_lease_s, notify,
  // track_interfaces, and the VIPs: those it drops are removed, whatever the role; a master adds
  // the new ones and announces them. A VIP on an interface or in a family the group had none on
  // opens that advertisement channel and watches the interface's carrier; a channel left without
  // VIPs is closed; a new port or group opens every channel anew. The election's settings are taken
  // at once, the VIPs and channels on the io_context's thread, where the sockets and the carrier
  // watch live. The builtin election only; the driver needs a restart. Any thread.
  void reconfigure(const FailoverConfig& next);
  // The VIPs the group runs with (those of the last reconfigure()). Any thread.
  std::vector<Vip> vips() const;
  // keepalived mode: the role keepalived decided. "" on success, otherwise why not.
  std::string set_external_role(Role role);

  // control::FailoverControl
  void fill_status(control::FailoverStatus* status) override;
  std::string demote(uint32_t amount) override;
  std::string promote(uint32_t amount) override;
  std::string set_role(control::FailoverStatus::Role role) override;
  HealthResult healthy() override;

  static Time now();

 private:
  void apply(Time now, const Actions& actions);
  void log_new_transitions();
  // When the next announcement is due after one at `t`: the fast repeats, then one a second until
  // the VIP lease has run out, then none.
  Time next_announcement(Time t) const;
  void log_vip_error(const std::string& what);
  // An add or removal of every VIP at `t`, outside the election's actions: renewal or retry.
  void upkeep_vips(Time t, VipWork work);
  void send_advert(Time now);
  void announce_all();
  void on_advert(std::span<const uint8_t> frame, int ttl, const AdvertChannel& channel,
                 const std::array<uint8_t, 16>& from);
  void on_links_changed();
  // What the links did since last_links_: sockets reopened on carrier, demotion, fault.
  void take_links(Time t);
  // The VIPs and lease of config_ into the kernel's set, with the channels and links they need.
  void take_vips(Time t);
  // The links and channels of config_: new links read at once, new channels opened, the others
  // closed.
  void take_watched_links(Time t);
  // Whether `name` holds VIPs (vip_links_): a tracked link's loss demotes, a VIP link's may fault.
  bool is_vip_link(const std::string& name) const;
  std::size_t vip_links_with_carrier() const;
  // An advertisement socket for each of config_'s channels, those that stay kept as they are.
  void take_channels();
  void update_demotion(Time now);
  void poll();
  void on_tick();
  void rearm();
  void start_with(std::optional<LinkWatch::Transport> link_transport);
  // Opens sockets_[i]; a failure is logged once per error.
  void open_socket(std::size_t i);
  void open_sockets_for(const std::string& ifname);
  bool has_carrier(const std::string& ifname) const;
  // Plans a retry of the sockets whose open failed on a link with carrier, unless one is planned;
  // forgets it when there are none.
  void plan_socket_retry(Time t);
  void retry_sockets(Time t);

  boost::asio::io_context& io_;
  FailoverConfig config_;  // a reload changes some of it (reconfigure)
  const uint32_t node_id_;
  FailoverHooks hooks_;

  mutable std::mutex mutex_;
  Election election_;
  Demotion demotion_;
  AdvertSendRecord advert_sends_;
  AdvertCodec codec_;
  FailoverCounters counters_;
  std::unique_ptr<VipSet> vips_;
  VipUpkeep vip_upkeep_;
  std::unique_ptr<Announcer> announcer_;
  RoleScript role_script_;
  std::unique_ptr<LinkWatch> links_;
  std::vector<std::unique_ptr<AdvertSocket>> sockets_;
  std::vector<std::string> socket_errors_;  // per socket: why its last open failed, "" if it did not
  Time socket_retry_at_ = kNever;
  std::array<bool, kRejectCount> reject_logged_{};
  bool own_id_logged_ = false;
  std::vector<LinkWatch::Link> last_links_;  // as on_links_changed() last saw them
  std::vector<std::string> vip_links_;       // the watched links that hold VIPs
  uint64_t link_resyncs_seen_ = 0;           // links_->resyncs() as on_links_changed() last saw it
  std::string last_vip_error_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer poll_timer_;

  const uint64_t boot_epoch_;
  uint64_t counter_ = 0;
  uint64_t logged_transitions_ = 0;
  bool running_ = false;
  bool vips_held_ = false;
  uint32_t announce_fast_left_ = 0;
  Time next_announce_ = kNever;
  Time announce_tail_until_ = kNever;
  Time last_health_check_ = kNever;
};

}  // namespace pairwall::failover
