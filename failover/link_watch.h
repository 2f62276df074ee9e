// Carrier of the VIP interfaces, from rtnetlink link events (RTMGRP_LINK) on the service's
// io_context. An interface has carrier when it is administratively up, its lower layer is up
// (IFF_LOWER_UP) and its operstate is up (or unknown, for drivers that do not report one).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

struct mnl_socket;
struct nlmsghdr;

namespace pairwall::failover {

class LinkWatch {
 public:
  struct Link {
    std::string name;
    unsigned ifindex = 0;  // 0: the interface does not exist
    bool carrier = false;
  };

  // `on_change` runs on the io_context after a batch of events changed any watched link.
  LinkWatch(boost::asio::io_context& io, std::vector<std::string> names, std::function<void()> on_change);
  ~LinkWatch();
  LinkWatch(const LinkWatch&) = delete;
  LinkWatch& operator=(const LinkWatch&) = delete;

  // Subscribes and reads the current state synchronously, so links() is valid on return.
  // Throws std::system_error.
  void start();
  void stop();

  const std::vector<Link>& links() const { return links_; }
  std::size_t with_carrier() const;
  uint64_t resyncs() const { return resyncs_; }  // full re-reads after the event queue overflowed

 private:
  // Asks for every link, or, while a dump runs (the kernel allows one per socket), for another
  // once it ends.
  void request_dump();
  // The dump ended (`complete`: with NLMSG_DONE): the links it did not name do not exist.
  void end_dump(bool complete);
  // Reads what is queued (or, blocking, until the dump ends); true when a watched link changed.
  bool read_pending(bool until_dump_done);
  int on_message(const nlmsghdr* nlh);
  void arm();

  std::vector<Link> links_;
  std::function<void()> on_change_;
  mnl_socket* nl_ = nullptr;
  boost::asio::posix::stream_descriptor fd_;
  uint32_t dump_seq_ = 0;  // of the dump in flight, 0 when none
  bool dump_again_ = false;
  int dumps_failed_ = 0;       // in a row: past a few, the next overflow asks again
  std::vector<bool> in_dump_;  // per link: named by the dump in flight
  bool changed_ = false;
  uint64_t resyncs_ = 0;
};

}  // namespace pairwall::failover
