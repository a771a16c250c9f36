// SIGINT/SIGTERM/SIGHUP caught by dtrun and recorded for the supervisor to forward.
#pragma once

namespace rtd::launcher {

void install_signal_handlers();
// The last signal received and not yet taken, or 0.
int take_pending_signal();

}  // namespace rtd::launcher
