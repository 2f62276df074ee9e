#include "failover/failover_service.h"

#include <net/if.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <string_view>

#include "failover/advert_socket.h"
#include "failover/announce.h"
#include "failover/link_watch.h"
#include "failover/vips.h"

namespace pairwall::failover {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

uint64_t wall_clock_us() {
  return static_cast<uint64_t>(
      duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

control::FailoverStatus::Role to_proto(Role r) {
  switch (r) {
    case Role::Init:
      return control::FailoverStatus::INIT;
    case Role::Backup:
      return control::FailoverStatus::BACKUP;
    case Role::Master:
      return control::FailoverStatus::MASTER;
    case Role::Fault:
      return control::FailoverStatus::FAULT;
  }
  return control::FailoverStatus::INIT;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

}  // namespace

std::optional<Role> role_from_vips(std::optional<std::size_t> present, std::size_t total) {
  // Unknown is not "none": taken for BACKUP, a master restarted while getifaddrs failed would
  // report BACKUP for as long as keepalived keeps it master.
  if (!present || total == 0) return std::nullopt;
  if (*present == total) return Role::Master;
  if (*present == 0) return Role::Backup;
  return std::nullopt;
}

Time FailoverService::now() {
  return duration_cast<Time>(std::chrono::steady_clock::now().time_since_epoch());
}

FailoverService::FailoverService(boost::asio::io_context& io, FailoverConfig config, uint32_t node_id,
                                 FailoverHooks hooks, uint64_t boot_epoch)
    : io_(io),
      config_(std::move(config)),
      node_id_(node_id),
      hooks_(std::move(hooks)),
      election_(ElectionConfig{node_id, milliseconds(config_.advbase_ms), config_.advskew, config_.preempt}),
      codec_(config_.key, config_.vhid, node_id, config_.accept_key),
      vip_upkeep_(config_.effective_vip_lease_s()),
      role_script_(config_.notify, config_.vhid),
      timer_(io),
      poll_timer_(io),
      boot_epoch_(boot_epoch ? boot_epoch : wall_clock_us()) {}

FailoverService::~FailoverService() {
  boost::system::error_code ec;
  timer_.cancel(ec);
  poll_timer_.cancel(ec);
}

void FailoverService::start() {
  start_with(std::nullopt);
}

void FailoverService::start(LinkWatch::Transport links) {
  start_with(std::move(links));
}

void FailoverService::start_with(std::optional<LinkWatch::Transport> link_transport) {
  // The first rank we advertise must already count an unfinished bulk sync.
  const bool bulk_done = hooks_.bulk_sync_complete ? hooks_.bulk_sync_complete() : true;
  const bool engine_ok = hooks_.engine_healthy ? hooks_.engine_healthy() : true;
  std::lock_guard lock(mutex_);
  demotion_.set(DemoteReason::BulkSync, !bulk_done);
  demotion_.set(DemoteReason::Engine, !engine_ok);
  const bool builtin = config_.driver == Driver::Builtin;
  vip_links_ = config_.interfaces();
  links_ = std::make_unique<LinkWatch>(io_, config_.watched_interfaces(), [this] { on_links_changed(); });
  if (link_transport) {
    links_->start(std::move(*link_transport));
  } else {
    links_->start();
  }
  last_links_ = links_->links();
  link_resyncs_seen_ = links_->resyncs();
  if (builtin) {
    vips_ = std::make_unique<VipSet>(config_.vips, config_.effective_vip_lease_s());
    announcer_ = std::make_unique<Announcer>();
    // A run killed with -9 left its VIPs behind; we start as backup and must not hold them.
    const VipResult leftover = vips_->release();
    if (leftover.changed) spdlog::warn("failover: removed {} VIPs left by an earlier run", leftover.changed);
    vip_upkeep_.removed(now(), leftover.failed != 0);
    if (leftover.failed) {
      ++counters_.vip_errors;
      log_vip_error("removing VIPs left by an earlier run: " + leftover.error);
    }
    take_channels();
  }
  running_ = true;
  const Time t = now();
  plan_socket_retry(t);
  update_demotion(t);
  if (builtin) {
    const bool fault = vip_links_with_carrier() == 0;
    apply(t, election_.start(t, fault));
  } else if (!config_.vips.empty()) {
    // keepalived tells a role only as it changes: restarted, this daemon would show INIT until the
    // next change. keepalived holds virtual_ipaddress as master alone, so the VIPs say which.
    const std::optional<std::size_t> held = count_present(config_.vips);
    if (const std::optional<Role> role = role_from_vips(held, config_.vips.size())) {
      election_.force_role(t, *role);
      spdlog::info("failover: {} of the {} VIPs are here: keepalived's role taken as {}", *held,
                   config_.vips.size(), *role == Role::Backup ? "BACKUP" : "MASTER");
      log_new_transitions();
    } else if (!held) {
      spdlog::warn("failover: the host's addresses could not be read: INIT until keepalived reports a role");
    } else {
      // keepalived holds all of them or none: some is a [failover] vips that is not
      // virtual_ipaddress, or an address keepalived does not own.
      spdlog::warn(
          "failover: {} of the {} VIPs are here, a mix keepalived never leaves: INIT until it reports a "
          "role (do [failover] vips list keepalived.conf's virtual_ipaddress?)",
          *held, config_.vips.size());
    }
  } else {
    spdlog::info("failover: no [failover] vips to read keepalived's role from: INIT until it reports one");
  }
  if (builtin) {
    spdlog::info("failover: vhid {} driver builtin node {} advbase {} ms advskew {} preempt {} VIPs {}",
                 config_.vhid, node_id_, config_.advbase_ms, config_.advskew, config_.preempt ? "on" : "off",
                 config_.vips.size());
    std::vector<std::string> channels;
    for (const auto& socket : sockets_) channels.push_back(socket->channel().text());
    spdlog::info("failover: vhid {} advertisements on {}", config_.vhid, join(channels, ", "));
  } else {
    spdlog::info("failover: driver keepalived node {}: the roles keepalived reports", node_id_);
  }
  rearm();
  poll_timer_.expires_after(kPollInterval);
  poll_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) poll();
  });
}

void FailoverService::stop() {
  std::lock_guard lock(mutex_);
  if (!running_) return;
  running_ = false;
  if (config_.driver == Driver::Builtin) apply(now(), election_.shutdown(now()));
  log_new_transitions();
  boost::system::error_code ec;
  timer_.cancel(ec);
  poll_timer_.cancel(ec);
  sockets_.clear();
  socket_errors_.clear();
  socket_retry_at_ = kNever;
  if (links_) links_->stop();
}

void FailoverService::apply(Time t, const Actions& a) {
  if (a.release_vips && vips_) {
    const VipResult r = vips_->release();
    vip_upkeep_.removed(t, r.failed != 0);
    if (r.failed) {
      ++counters_.vip_errors;
      log_vip_error("releasing VIPs: " + r.error);
    } else {
      last_vip_error_.clear();  // the same failure later is news again
    }
    vips_held_ = false;
    announce_fast_left_ = 0;
    next_announce_ = kNever;
  }
  if (a.acquire_vips && vips_) {
    const VipResult r = vips_->acquire();
    vip_upkeep_.added(t, r.failed != 0);
    if (r.failed) {
      ++counters_.vip_errors;
      log_vip_error("adding VIPs: " + r.error);
    } else {
      last_vip_error_.clear();
    }
    vips_held_ = true;
  }
  if (a.send_advert) send_advert(t);
  if (a.announce && vips_held_) {
    announce_all();
    announce_fast_left_ = config_.announce_count;
    // While a killed master's kernel may still answer for the VIPs (until its lease runs out),
    // keep repeating, slower, so every neighbour ends on our side; with no fast repeats as well.
    const uint32_t lease = vips_ ? vips_->lease_s() : 0;
    announce_tail_until_ = lease ? t + std::chrono::seconds(lease + 1) : t;
    next_announce_ = next_announcement(t);
  }
  log_new_transitions();
}

Time FailoverService::next_announcement(Time t) const {
  if (announce_fast_left_ > 0) return t + milliseconds(config_.effective_announce_interval_ms());
  if (t < announce_tail_until_) return t + std::chrono::seconds(1);
  return kNever;
}

void FailoverService::log_vip_error(const std::string& what) {
  // A master whose VIP interface is gone, or a backup whose removal fails, tries again every
  // second or so: say so once, not every second.
  if (what == last_vip_error_) return;
  last_vip_error_ = what;
  spdlog::error("failover: {} (retried until it succeeds; counted in vip_errors)", what);
}

void FailoverService::upkeep_vips(Time t, VipWork work) {
  const bool retry = vip_upkeep_.retrying();
  const bool add = work == VipWork::Add;
  const VipResult r = add ? vips_->acquire() : vips_->release();
  if (add) {
    vip_upkeep_.added(t, r.failed != 0);
  } else {
    vip_upkeep_.removed(t, r.failed != 0);
  }
  if (retry) {
    ++counters_.vip_retries;
  } else {
    ++counters_.vip_renewals;
  }
  if (r.failed) {
    ++counters_.vip_errors;
    log_vip_error(std::string(add ? (retry ? "adding VIPs: " : "renewing VIPs: ") : "releasing VIPs: ") +
                  r.error);
  } else {
    if (retry) spdlog::info("failover: VIPs {} after failing before", add ? "added" : "removed");
    last_vip_error_.clear();
  }
}

void FailoverService::log_new_transitions() {
  const TransitionLog& log = election_.transitions();
  const uint64_t total = log.total();
  const uint64_t first_kept = total - log.size();
  for (uint64_t n = std::max(logged_transitions_, first_kept); n < total; ++n) {
    const Transition& tr = log[static_cast<std::size_t>(n - first_kept)];
    if (tr.peer) {
      spdlog::info("failover: vhid {} {} -> {} ({}, node {}), demotion {}", config_.vhid, role_name(tr.from),
                   role_name(tr.to), cause_name(tr.cause), tr.peer, demotion_.total());
    } else {
      spdlog::info("failover: vhid {} {} -> {} ({}), demotion {}", config_.vhid, role_name(tr.from),
                   role_name(tr.to), cause_name(tr.cause), demotion_.total());
    }
    role_script_.role_changed(tr.to, cause_name(tr.cause));
  }
  logged_transitions_ = total;
}

void FailoverService::send_advert(Time) {
  const Advert a = advert_of(election_.advert(), node_id_, boot_epoch_, ++counter_);
  uint8_t frame[kAdvertMaxFrame];
  const std::size_t n = codec_.encode(a, frame);
  bool left = false;
  if (n == 0) {
    ++counters_.advert_send_errors;
  } else {
    for (auto& s : sockets_) {
      if (!s->is_open()) continue;
      if (s->send(std::span<const uint8_t>(frame, n)) == 0) {
        ++counters_.adverts_sent;
        left = true;
      } else {
        ++counters_.advert_send_errors;  // e.g. ENETDOWN on an interface without carrier
      }
    }
  }
  // The election takes it at the next poll: from here, it would send again, and again record.
  demotion_.set(DemoteReason::AdvertSend, advert_sends_.record(left));
}

void FailoverService::announce_all() {
  for (const auto& vip : vips_->vips()) {
    const unsigned ifindex = if_nametoindex(vip.interface.c_str());
    if (ifindex && announcer_->announce(vip, ifindex) == 0) {
      ++counters_.announcements;
    } else {
      ++counters_.announce_errors;
    }
  }
}

void FailoverService::on_advert(std::span<const uint8_t> frame, int ttl, const AdvertChannel& channel,
                                const std::array<uint8_t, 16>& from) {
  std::lock_guard lock(mutex_);
  if (!running_) return;
  // Asked of the VIPs as they are now: a reload may have changed them.
  const auto r = codec_.decode(frame, ttl, config_.from_peer(channel, from));
  if (!r.ok && r.reason == Reject::Own && !own_id_logged_) {
    // Our own adverts brought back by a loop are replays (the codec knows what it sent): this is
    // another node with this node's id, and neither can win an election against the other.
    own_id_logged_ = true;
    spdlog::error(
        "failover: another node advertises with this node's id {} on vhid {}: give each node of the "
        "pair its own [node] id",
        node_id_, config_.vhid);
  }
  if (!r.ok) {
    // One line per reason, not per datagram: a flood must not flood the journal. Copies are
    // normal (one per interface and family) and not worth a line at all.
    auto& logged = reject_logged_[static_cast<std::size_t>(r.reason)];
    if (!logged && r.reason != Reject::Duplicate) {
      logged = true;
      spdlog::warn("failover: rejected an advertisement ({}); further ones are only counted",
                   reject_name(r.reason));
    }
    return;
  }
  ++counters_.adverts_accepted;
  const Advert& a = r.advert;
  const Time t = now();
  apply(t, election_.on_advert(
               t, PeerAdvert{a.node_id, milliseconds(a.advbase_ms), a.advskew, a.demotion, a.leaving}));
  rearm();
}

void FailoverService::open_socket(std::size_t i) {
  AdvertSocket& s = *sockets_[i];
  try {
    s.open([this, channel = s.channel()](std::span<const uint8_t> f, int ttl,
                                         const std::array<uint8_t, 16>& from) {
      on_advert(f, ttl, channel, from);
    });
  } catch (const std::system_error& e) {
    // Tried again every second while the link has carrier: say so once, not every second.
    if (socket_errors_[i] != e.what()) {
      socket_errors_[i] = e.what();
      spdlog::warn("{} (tried again while {} has carrier)", e.what(), s.ifname());
    }
    return;
  }
  if (!socket_errors_[i].empty()) {
    spdlog::info("failover: advertisement socket on {} open after failing before", s.ifname());
    socket_errors_[i].clear();
  }
}

void FailoverService::open_sockets_for(const std::string& ifname) {
  for (std::size_t i = 0; i < sockets_.size(); ++i) {
    if (sockets_[i]->ifname() == ifname) open_socket(i);
  }
}

bool FailoverService::has_carrier(const std::string& ifname) const {
  for (const auto& l : links_->links()) {
    if (l.name == ifname) return l.carrier;
  }
  return false;
}

void FailoverService::plan_socket_retry(Time t) {
  const bool failed = std::any_of(sockets_.begin(), sockets_.end(), [this](const auto& s) {
    return !s->is_open() && has_carrier(s->ifname());
  });
  if (!failed) {
    socket_retry_at_ = kNever;
  } else if (socket_retry_at_ == kNever) {
    socket_retry_at_ = t + kSocketRetryInterval;
  }
}

void FailoverService::retry_sockets(Time t) {
  for (std::size_t i = 0; i < sockets_.size(); ++i) {
    if (sockets_[i]->is_open() || !has_carrier(sockets_[i]->ifname())) continue;
    ++counters_.advert_socket_retries;
    open_socket(i);
  }
  socket_retry_at_ = kNever;
  plan_socket_retry(t);
}

void FailoverService::on_links_changed() {
  std::lock_guard lock(mutex_);
  if (!running_) return;
  take_links(now());
  rearm();
}

void FailoverService::take_links(Time t) {
  const auto& links = links_->links();
  last_links_.resize(links.size());
  bool came_up = false;
  for (std::size_t i = 0; i < links.size(); ++i) {
    const LinkWatch::Link before = last_links_[i];
    last_links_[i] = links[i];
    // An interface deleted and made again between two looks keeps its carrier but not its index:
    // the sockets bound to the old one hear and send nothing. One taken down and up again keeps
    // both, but not its IPv6 addresses.
    const bool recreated = links[i].carrier && before.carrier && links[i].ifindex != before.ifindex;
    const bool bounced =
        links[i].carrier && before.carrier && links[i].carrier_losses != before.carrier_losses;
    if (links[i].carrier == before.carrier && !recreated && !bounced) continue;
    if (recreated) {
      spdlog::info("failover: {} was created again (index {} -> {})", links[i].name, before.ifindex,
                   links[i].ifindex);
    } else if (bounced) {
      spdlog::info("failover: {} carrier down and up again", links[i].name);
    } else {
      spdlog::info("failover: {} carrier {}", links[i].name, links[i].carrier ? "up" : "down");
    }
    if (!links[i].carrier) continue;
    came_up |= is_vip_link(links[i].name);
    // Memberships do not survive an interface deleted and created again; reopening on carrier
    // covers that and every other way a link comes back.
    open_sockets_for(links[i].name);
  }
  // Link events lost to an overflow may have told of a bounce that the links read again cannot show.
  const bool events_lost = links_->resyncs() != link_resyncs_seen_;
  link_resyncs_seen_ = links_->resyncs();
  plan_socket_retry(t);
  update_demotion(t);
  if (config_.driver == Driver::Builtin) {
    apply(t, election_.set_fault(t, vip_links_with_carrier() == 0));
    if ((came_up || events_lost) && election_.role() == Role::Master) {
      // IPv6 addresses leave an interface that goes down; put them back and tell the segment.
      apply(t, Actions{.acquire_vips = true, .announce = true});
    }
  }
}

void FailoverService::take_channels() {
  std::vector<std::unique_ptr<AdvertSocket>> sockets;
  std::vector<std::string> errors;
  std::vector<std::size_t> opening;
  for (const AdvertChannel& channel : config_.advert_channels()) {
    const auto kept = std::find_if(sockets_.begin(), sockets_.end(),
                                   [&](const auto& s) { return s && s->channel() == channel; });
    if (kept != sockets_.end()) {
      errors.push_back(std::move(socket_errors_[static_cast<std::size_t>(kept - sockets_.begin())]));
      sockets.push_back(std::move(*kept));
      continue;
    }
    sockets.push_back(std::make_unique<AdvertSocket>(io_, channel));
    errors.emplace_back();
    opening.push_back(sockets.size() - 1);
  }
  sockets_ = std::move(sockets);  // a channel left without VIPs closes here
  socket_errors_ = std::move(errors);
  // An interface missing now is not fatal: carrier watch reopens its socket when it appears.
  for (const std::size_t i : opening) open_socket(i);
}

void FailoverService::take_vips(Time t) {
  const uint32_t lease = config_.effective_vip_lease_s();
  const bool vips_changed = vips_->vips() != config_.vips;
  const bool lease_changed = lease != vips_->lease_s();
  if (vips_changed) {
    std::vector<std::string> listed;
    for (const Vip& v : config_.vips) listed.push_back(v.interface + " " + v.text());
    spdlog::info("failover: vhid {} VIPs now {}", config_.vhid, join(listed, ", "));
  }
  if (vips_changed || lease_changed) {
    const VipResult dropped = vips_->replace(config_.vips, lease);
    vip_upkeep_.set_lease(lease);
    if (dropped.failed) {
      ++counters_.vip_errors;
      spdlog::error("failover: removing the VIPs the reload dropped: {} (not tried again: remove it by hand)",
                    dropped.error);
    }
  }
  take_watched_links(t);
  // A master adds the new VIPs now and announces them, and gives the others the new lease: a lease
  // made longer would otherwise run out before the renewal its new cadence plans.
  if (vips_held_ && (vips_changed || lease_changed))
    apply(t, Actions{.acquire_vips = true, .announce = vips_changed});
}

void FailoverService::take_watched_links(Time t) {
  std::vector<AdvertChannel> running;
  for (const auto& socket : sockets_) running.push_back(socket->channel());
  const std::vector<AdvertChannel> wanted = config_.advert_channels();
  std::vector<std::string> watching;
  for (const LinkWatch::Link& link : links_->links()) watching.push_back(link.name);
  const std::vector<std::string> watched = config_.watched_interfaces();
  if (wanted == running && watched == watching) return;
  const auto log_missing = [](const std::vector<AdvertChannel>& from, const std::vector<AdvertChannel>& in,
                              std::string_view what) {
    for (const AdvertChannel& c : from) {
      if (std::find(in.begin(), in.end(), c) != in.end()) continue;
      spdlog::info("failover: advertisements {} {}", what, c.text());
    }
  };
  log_missing(wanted, running, "now on");
  log_missing(running, wanted, "no longer on");
  if (watched != watching) spdlog::info("failover: carrier watched on {}", join(watched, ", "));
  links_->watch(watched);
  vip_links_ = config_.interfaces();
  // What the links did before this is still news to take_links(); a new link starts as read.
  std::vector<LinkWatch::Link> seen;
  for (const LinkWatch::Link& link : links_->links()) {
    const auto before = std::find_if(last_links_.begin(), last_links_.end(),
                                     [&](const LinkWatch::Link& l) { return l.name == link.name; });
    seen.push_back(before != last_links_.end() ? *before : link);
  }
  last_links_ = std::move(seen);
  take_channels();
  take_links(t);
}

bool FailoverService::is_vip_link(const std::string& name) const {
  return std::find(vip_links_.begin(), vip_links_.end(), name) != vip_links_.end();
}

std::size_t FailoverService::vip_links_with_carrier() const {
  std::size_t up = 0;
  for (const LinkWatch::Link& link : links_->links()) up += link.carrier && is_vip_link(link.name);
  return up;
}

void FailoverService::update_demotion(Time t) {
  if (links_) {
    bool vip_link_down = false;
    bool tracked_link_down = false;
    for (const LinkWatch::Link& link : links_->links()) {
      if (!link.carrier) (is_vip_link(link.name) ? vip_link_down : tracked_link_down) = true;
    }
    demotion_.set(DemoteReason::Carrier, vip_link_down);
    demotion_.set(DemoteReason::TrackedLink, tracked_link_down);
  }
  if (config_.driver == Driver::Builtin) apply(t, election_.set_demotion(t, demotion_.total()));
}

void FailoverService::poll() {
  // The hooks belong to other components: call them without holding our lock.
  const bool bulk_done = hooks_.bulk_sync_complete ? hooks_.bulk_sync_complete() : true;
  const bool engine_ok = hooks_.engine_healthy ? hooks_.engine_healthy() : true;
  {
    std::lock_guard lock(mutex_);
    if (!running_) return;
    demotion_.set(DemoteReason::BulkSync, !bulk_done);
    demotion_.set(DemoteReason::Engine, !engine_ok);
    update_demotion(now());
    role_script_.poll();
    rearm();
  }
  poll_timer_.expires_after(kPollInterval);
  poll_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) poll();
  });
}

void FailoverService::on_tick() {
  std::lock_guard lock(mutex_);
  if (!running_) return;
  const Time t = now();
  if (config_.driver == Driver::Builtin) apply(t, election_.on_timer(t));
  const bool master = election_.role() == Role::Master;
  if (const VipWork work = vip_upkeep_.due(t); work != VipWork::None && vips_) upkeep_vips(t, work);
  if (t >= socket_retry_at_) retry_sockets(t);
  if (master && t >= next_announce_) {
    announce_all();
    if (announce_fast_left_ > 0) --announce_fast_left_;
    next_announce_ = next_announcement(t);
  }
  rearm();
}

void FailoverService::rearm() {
  Time next = std::min(
      {election_.role() == Role::Master ? next_announce_ : kNever, vip_upkeep_.next(), socket_retry_at_});
  if (config_.driver == Driver::Builtin) next = std::min(next, election_.deadline());
  if (next == kNever) {
    boost::system::error_code ec;
    timer_.cancel(ec);
    return;
  }
  timer_.expires_at(
      std::chrono::steady_clock::time_point(duration_cast<std::chrono::steady_clock::duration>(next)));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) on_tick();
  });
}

FailoverSnapshot FailoverService::snapshot() const {
  std::lock_guard lock(mutex_);
  FailoverSnapshot s;
  s.driver = config_.driver;
  s.node_id = node_id_;
  s.role = election_.role();
  s.vhid = config_.vhid;
  s.advbase_ms = config_.advbase_ms;
  s.advskew = config_.advskew;
  s.preempt = config_.preempt;
  s.demotion = demotion_.total();
  s.demotion_reasons = demotion_.reasons();
  for (std::size_t i = 0; i < kDemoteReasonCount; ++i) {
    s.demotion_by_reason[i] = demotion_.contribution(static_cast<DemoteReason>(i));
  }
  s.now = now();
  s.peer = election_.peer();
  if (s.peer) s.last_heard_ms_ago = duration_cast<milliseconds>(s.now - s.peer->at).count();
  if (last_health_check_ != kNever)
    s.health_checked_ms_ago = duration_cast<milliseconds>(s.now - last_health_check_).count();
  if (s.role == Role::Master) {
    s.master_node_id = node_id_;
  } else if (s.role == Role::Backup && s.peer && !s.peer->leaving &&
             s.now - s.peer->at < election_.master_down_interval()) {
    s.master_node_id = s.peer->node_id;
  }
  s.vips_held = vips_held_;
  s.notify = config_.notify;
  for (const auto& v : config_.vips) s.vips.push_back(v.interface + " " + v.text());
  if (links_) {
    for (const auto& l : links_->links()) s.links.push_back({l.name, l.carrier, !is_vip_link(l.name)});
  }
  for (const auto& socket : sockets_) s.advertisements.push_back(socket->channel().text());
  const int64_t unix_now_ms = static_cast<int64_t>(wall_clock_us() / 1000);
  const TransitionLog& log = election_.transitions();
  for (std::size_t i = 0; i < log.size(); ++i) {
    const Transition& t = log[i];
    s.transitions.push_back({t.at, unix_now_ms - duration_cast<milliseconds>(s.now - t.at).count(), t.from,
                             t.to, std::string(cause_name(t.cause)), t.peer});
  }
  s.transitions_total = log.total();
  s.rejects = codec_.rejects();
  s.counters = counters_;
  s.counters.adverts_on_accept_key = codec_.accepted_on_accept_key();
  s.counters.notify_runs = role_script_.counters().runs;
  s.counters.notify_failures = role_script_.counters().failures;
  s.counters.worse_masters = election_.worse_masters();
  // The codec turns away adverts with this node's id before the election sees them (Reject::Own).
  s.counters.node_id_conflicts =
      election_.node_id_conflicts() + codec_.rejects()[static_cast<std::size_t>(Reject::Own)];
  if (links_) s.counters.link_resyncs = links_->resyncs();
  return s;
}

void FailoverService::fill_status(control::FailoverStatus* status) {
  const FailoverSnapshot s = snapshot();
  status->set_enabled(true);
  status->set_driver(s.driver == Driver::Builtin ? "builtin" : "keepalived");
  status->set_role(to_proto(s.role));
  status->set_vhid(s.vhid);
  status->set_advbase_ms(s.advbase_ms);
  status->set_advskew(s.advskew);
  status->set_preempt(s.preempt);
  status->set_demotion(s.demotion);
  for (const auto& r : s.demotion_reasons) status->add_demotion_reasons(r);
  status->set_last_heard_ms_ago(s.last_heard_ms_ago);
  status->set_health_checked_ms_ago(s.health_checked_ms_ago);
  status->set_master_node_id(s.master_node_id);
  for (const auto& t : s.transitions) {
    auto* tr = status->add_transitions();
    tr->set_unix_ms(static_cast<uint64_t>(t.unix_ms));
    tr->set_from(to_proto(t.from));
    tr->set_to(to_proto(t.to));
    tr->set_cause(t.peer ? t.cause + " (node " + std::to_string(t.peer) + ")" : t.cause);
  }
  for (const std::string& vip : s.vips) status->add_vips(vip);
  status->set_vips_held(s.vips_held);
  for (const FailoverSnapshot::LinkView& l : s.links) {
    auto* link = status->add_links();
    link->set_interface(l.name);
    link->set_carrier(l.carrier);
    link->set_tracked(l.tracked);
  }
  status->set_notify(s.notify);
  for (const std::string& channel : s.advertisements) status->add_advertisements(channel);
  auto& rejects = *status->mutable_rejects();
  for (std::size_t i = 0; i < kRejectCount; ++i) rejects[reject_name(static_cast<Reject>(i))] = s.rejects[i];
}

void FailoverService::set_keys(std::string key, std::string accept_key) {
  std::lock_guard lock(mutex_);
  codec_.set_keys(std::move(key), std::move(accept_key));
}

void FailoverService::reconfigure(const FailoverConfig& next) {
  std::lock_guard lock(mutex_);
  if (config_.driver != Driver::Builtin) return;
  const Time t = now();
  Actions actions;
  const ElectionConfig& running = election_.config();
  if (next.advskew != running.advskew || next.preempt != running.preempt) {
    spdlog::info("failover: vhid {} advskew {} -> {}, preempt {} -> {}", config_.vhid, running.advskew,
                 next.advskew, running.preempt ? "on" : "off", next.preempt ? "on" : "off");
    actions |= election_.set_preference(t, next.advskew, next.preempt);
  }
  if (next.advbase_ms != config_.advbase_ms) {
    spdlog::info("failover: vhid {} advbase {} -> {} ms", config_.vhid, config_.advbase_ms, next.advbase_ms);
    actions |= election_.set_advbase(t, milliseconds(next.advbase_ms));
  }
  if (next.vhid != config_.vhid) {
    // As `ifconfig carpN vhid N`: the peer, until it takes the same vhid, is not heard (its
    // advertisements are refused as wrong_vhid) and does not hear this node.
    spdlog::info("failover: vhid {} -> {}", config_.vhid, next.vhid);
    config_.vhid = next.vhid;
    codec_.set_vhid(next.vhid);
    role_script_.set_vhid(next.vhid);
  }
  // A new port, group or peer is a new channel: take_vips() below opens it in the old one's place.
  config_.port = next.port;
  config_.group4 = next.group4;
  config_.group6 = next.group6;
  config_.peers = next.peers;
  config_.advskew = next.advskew;
  config_.preempt = next.preempt;
  config_.advbase_ms = next.advbase_ms;
  config_.announce_count = next.announce_count;
  config_.announce_interval_ms = next.announce_interval_ms;
  config_.vip_lease_s = next.vip_lease_s;
  config_.vips = next.vips;
  config_.track_interfaces = next.track_interfaces;
  if (next.notify != config_.notify) {
    spdlog::info("failover: vhid {} notify now {}", config_.vhid, next.notify.empty() ? "none" : next.notify);
    config_.notify = next.notify;
    role_script_.set_path(next.notify);
  }
  apply(t, actions);
  rearm();
  // take_vips() compares config_ with what runs, and does nothing when they agree.
  boost::asio::post(io_, [this] {
    std::lock_guard on_io_thread(mutex_);
    if (!running_ || !vips_) return;
    take_vips(now());
    rearm();
  });
}

std::vector<Vip> FailoverService::vips() const {
  std::lock_guard lock(mutex_);
  return config_.vips;
}

std::string FailoverService::demote(uint32_t amount) {
  std::lock_guard lock(mutex_);
  demotion_.demote(amount);
  spdlog::info("failover: administrative demotion +{}, now {}", amount, demotion_.total());
  update_demotion(now());
  rearm();
  return "";
}

std::string FailoverService::promote(uint32_t amount) {
  std::lock_guard lock(mutex_);
  if (demotion_.admin() == 0) return "nothing to promote: the administrative demotion is 0";
  demotion_.promote(amount);
  spdlog::info("failover: administrative demotion -{}, now {}", amount, demotion_.total());
  update_demotion(now());
  rearm();
  return "";
}

std::string FailoverService::set_external_role(Role role) {
  std::lock_guard lock(mutex_);
  if (config_.driver != Driver::Keepalived) {
    return "set-role is for [failover] driver = \"keepalived\"; this node runs the builtin election "
           "(use demote / promote)";
  }
  election_.force_role(now(), role);
  log_new_transitions();
  return "";
}

std::string FailoverService::set_role(control::FailoverStatus::Role role) {
  switch (role) {
    case control::FailoverStatus::MASTER:
      return set_external_role(Role::Master);
    case control::FailoverStatus::BACKUP:
      return set_external_role(Role::Backup);
    case control::FailoverStatus::FAULT:
      return set_external_role(Role::Fault);
    case control::FailoverStatus::INIT:
      // The field's default, so also a request that names no role; keepalived never reports it.
      return "set-role: expected master, backup or fault, got init (a request without a role?)";
    default:
      break;
  }
  return "set-role: expected master, backup or fault, got role " + std::to_string(static_cast<int>(role));
}

control::FailoverControl::HealthResult FailoverService::healthy() {
  std::lock_guard lock(mutex_);
  HealthResult h;
  last_health_check_ = now();
  if (!running_) return HealthResult{false, "failover service not running"};
  if (demotion_.total() > 0) {
    h.healthy = false;
    h.reason = "demoted " + std::to_string(demotion_.total()) + ": " + join(demotion_.reasons(), ", ");
  }
  return h;
}

}  // namespace pairwall::failover
