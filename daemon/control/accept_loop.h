// The accept loop both control listeners run (the control socket and the metrics port).
#pragma once

#include <boost/asio/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <utility>

namespace pairwall::control {

// Accepts connections until the acceptor is closed or `stopped` is set, handing each to
// `serve(socket)`. The acceptor, timer and flag must outlive the loop (members of its owner).
template <typename Acceptor, typename Serve>
void accept_connections(Acceptor& acceptor, boost::asio::steady_timer& retry, const bool& stopped,
                        Serve serve) {
  acceptor.async_accept(
      [&acceptor, &retry, &stopped, serve](boost::system::error_code ec, auto socket) mutable {
        if (ec == boost::asio::error::operation_aborted || stopped) return;
        if (ec) {
          // Out of descriptors or memory: retry shortly instead of spinning on the error.
          retry.expires_after(std::chrono::milliseconds(100));
          retry.async_wait([&acceptor, &retry, &stopped, serve](boost::system::error_code wait_ec) {
            if (!wait_ec && !stopped) accept_connections(acceptor, retry, stopped, serve);
          });
          return;
        }
        serve(std::move(socket));
        accept_connections(acceptor, retry, stopped, std::move(serve));
      });
}

}  // namespace pairwall::control
