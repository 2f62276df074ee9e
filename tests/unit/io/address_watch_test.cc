// Link events crafted with libmnl the way rtnetlink lays them out: which of them change what an
// ifindex names.
#include "daemon/io/address_watch.h"

#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <net/if.h>

#include <catch2/catch.hpp>
#include <vector>

namespace pairwall::io {
namespace {

struct LinkEvent {
  std::vector<char> buffer = std::vector<char>(MNL_SOCKET_BUFFER_SIZE, 0);
  nlmsghdr* nlh;

  LinkEvent(uint16_t type, int ifindex, const char* name = nullptr) {
    nlh = mnl_nlmsg_put_header(buffer.data());
    nlh->nlmsg_type = type;
    auto* info = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(nlh, sizeof(ifinfomsg)));
    info->ifi_family = AF_UNSPEC;
    info->ifi_index = ifindex;
    mnl_attr_put_u32(nlh, IFLA_MTU, 1500);
    if (name != nullptr) mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
  }
};

TEST_CASE("link events that change what an ifindex names, and those that do not", "[address_watch]") {
  LinkNames names;
  names.set(2, "eth0");
  names.set(3, "eth1");

  SECTION("a renamed interface") {
    CHECK(names.apply(LinkEvent(RTM_NEWLINK, 3, "lan0").nlh));
    CHECK_FALSE(names.apply(LinkEvent(RTM_NEWLINK, 3, "lan0").nlh));  // its next carrier change
    CHECK(names.apply(LinkEvent(RTM_NEWLINK, 3, "eth1").nlh));        // and back
  }
  SECTION("a change of a known interface that keeps its name (carrier, MTU)") {
    CHECK_FALSE(names.apply(LinkEvent(RTM_NEWLINK, 2, "eth0").nlh));
  }
  SECTION("a new interface, then removed") {
    CHECK_FALSE(names.apply(LinkEvent(RTM_NEWLINK, 9, "veth9").nlh));
    CHECK(names.apply(LinkEvent(RTM_NEWLINK, 9, "wan0").nlh));
    CHECK(names.apply(LinkEvent(RTM_DELLINK, 9, "wan0").nlh));
    CHECK_FALSE(names.apply(LinkEvent(RTM_NEWLINK, 9, "other").nlh));  // the index, free again
  }
  SECTION("a known interface removed; an unknown one's removal changes nothing") {
    CHECK(names.apply(LinkEvent(RTM_DELLINK, 2, "eth0").nlh));
    CHECK_FALSE(names.apply(LinkEvent(RTM_DELLINK, 42, "gone").nlh));
  }
  SECTION("messages that name nothing") {
    CHECK_FALSE(names.apply(LinkEvent(RTM_NEWLINK, 3).nlh));  // no IFLA_IFNAME
    LinkEvent address(RTM_NEWADDR, 3, "lan0");
    CHECK_FALSE(names.apply(address.nlh));
    LinkEvent cut(RTM_NEWLINK, 3, "lan0");
    cut.nlh->nlmsg_len = MNL_NLMSG_HDRLEN + 4;  // shorter than its ifinfomsg
    CHECK_FALSE(names.apply(cut.nlh));
  }
}

TEST_CASE("the interface names are read from the kernel", "[address_watch]") {
  LinkNames names;
  REQUIRE(names.reload());
  // Every namespace has its loopback, under that name unless someone renamed it.
  const unsigned lo = if_nametoindex("lo");
  if (lo != 0) CHECK_FALSE(names.apply(LinkEvent(RTM_NEWLINK, static_cast<int>(lo), "lo").nlh));
}

}  // namespace
}  // namespace pairwall::io
