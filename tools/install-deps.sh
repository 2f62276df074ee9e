#!/usr/bin/env bash
# Installs everything pairwall needs to build, test and run its lab on Debian 12.
# Idempotent: packages already present are skipped by apt.
set -euo pipefail

packages=(
  # build
  build-essential cmake ninja-build pkg-config clang-14 libfuzzer-14-dev libclang-rt-14-dev
  clang-format clang-tidy
  # the Debian package: cpack's DEB generator reads library dependencies with dpkg-shlibdeps
  dpkg-dev
  # libraries fixed by the design card
  libboost-dev libprotobuf-dev protobuf-compiler libnetfilter-queue-dev libnetfilter-conntrack-dev
  libmnl-dev libspdlog-dev catch2
  # HMAC-SHA256 for sync and advertisements; config parsing; sd_notify
  libssl-dev libtomlplusplus-dev libsystemd-dev
  # systemd-analyze checks the shipped unit in the tests
  systemd
  # lab, integration tests and benchmarks
  iproute2 iptables ipset keepalived conntrack conntrackd iperf3 netsniff-ng tcpdump
  python3 python3-pytest python3-scapy python3-matplotlib procps iputils-ping sysstat
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "pairwall dependencies present"
