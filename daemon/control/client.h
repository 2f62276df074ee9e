// A blocking client for the control socket, used by pairwallctl and the tests.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

#include "daemon/control/framing.h"
#include "proto/control.pb.h"

namespace pairwall::control {

class ControlClient {
 public:
  // Connects to `path`. Throws std::runtime_error naming the path and the likely cause.
  explicit ControlClient(const std::string& path,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Sends one request and waits for its response. Throws std::runtime_error on a transport
  // failure; a refusal by the daemon comes back as a Response with ok = false.
  Response call(const Request& request);

  // Sends raw bytes (tests use this to send malformed frames; empty sends nothing) and reads the
  // next response frame.
  Response call_raw(const std::string& bytes);

 private:
  std::string path_;
  int fd_ = -1;
  // Kept across calls: responses to pipelined requests may arrive in one read.
  FrameReader reader_{kMaxResponseBytes};
};

}  // namespace pairwall::control
