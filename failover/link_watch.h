// Carrier of the watched links (the VIP interfaces and the tracked ones), from rtnetlink link
// events (RTMGRP_LINK) on the service's io_context. An interface has carrier when it is
// administratively up, its lower layer is up (IFF_LOWER_UP) and its operstate is up (or unknown,
// for drivers that do not report one).
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
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
    // Times it lost carrier, or was deleted or renamed away while it had carrier: a link that went
    // down and up again between two looks has the carrier it had, and this tells the bounce.
    uint64_t carrier_losses = 0;
  };

  // `on_change` runs on the io_context after a batch of events changed any watched link.
  LinkWatch(boost::asio::io_context& io, std::vector<std::string> names, std::function<void()> on_change);
  ~LinkWatch();
  LinkWatch(const LinkWatch&) = delete;
  LinkWatch& operator=(const LinkWatch&) = delete;

  // The rtnetlink socket as the watch uses it: its fd (readable when a message waits; not closed
  // by the watch), and one datagram sent or received as sendto(2) / recvfrom(2) do.
  struct Transport {
    int fd = -1;
    std::function<ssize_t(const void* buf, std::size_t len)> send;
    std::function<ssize_t(void* buf, std::size_t len)> receive;
  };

  // A link dump that cannot be asked for, or that fails a few times in a row, is asked for again
  // after this, doubling up to kDumpRetryMax, until one completes.
  static constexpr std::chrono::milliseconds kDumpRetryFirst{100};
  static constexpr std::chrono::milliseconds kDumpRetryMax{5000};

  // Subscribes and reads the current state synchronously, so links() is valid on return (or, if
  // the kernel refused the dump, once on_change reports it). Throws std::system_error.
  void start();
  // The same over `transport` instead of a socket of its own.
  void start(Transport transport);
  void stop();
  // Watches `names` from now on, in that order: a link watched before keeps what is known of it,
  // and the others are read as start() reads them, so that links() tells their carrier on return
  // (a link read as absent for a moment would demote the node); on_change is not called for what
  // that read finds. On the io_context's thread.
  void watch(std::vector<std::string> names);

  const std::vector<Link>& links() const { return links_; }
  std::size_t with_carrier() const;
  uint64_t resyncs() const { return resyncs_; }  // full re-reads after the event queue overflowed

 private:
  // Asks for every link, or, while a dump runs (the kernel allows one per socket), for another
  // once it ends.
  void request_dump();
  // Asks for the dump again later: on the io_context, so a kernel that refuses it at once does not
  // make us spin.
  void retry_dump_later();
  // The dump ended (`complete`: with NLMSG_DONE): the links that neither it nor an event read
  // meanwhile named do not exist.
  void end_dump(bool complete);
  // Reads what is queued (or, blocking, until the dump ends); true when a watched link changed.
  bool read_pending(bool until_dump_done);
  // Asks for a dump and reads until it has ended, blocking.
  void read_links_now();
  int on_message(const nlmsghdr* nlh);
  void arm();

  std::vector<Link> links_;
  std::function<void()> on_change_;
  mnl_socket* nl_ = nullptr;
  Transport transport_;
  bool started_ = false;
  boost::asio::posix::stream_descriptor fd_;
  boost::asio::steady_timer retry_timer_;
  bool retry_pending_ = false;
  int dump_retries_ = 0;   // since a dump last completed
  uint32_t dump_seq_ = 0;  // of the dump in flight, 0 when none
  bool dump_again_ = false;
  int dumps_failed_ = 0;       // in a row: past a few, asked again later, not at once
  std::vector<bool> in_dump_;  // per link: named by the dump in flight, or an event read during it
  bool changed_ = false;
  uint64_t resyncs_ = 0;
};

}  // namespace pairwall::failover
