// dtrun doctor: gather, judge, print (doctor.h).
#include "launcher/doctor/doctor.h"

#include <algorithm>
#include <cstdio>

#include "launcher/doctor/checks.h"
#include "launcher/doctor/facts.h"
#include "launcher/net.h"
#include "rt_dist/error.h"

namespace rtd::launcher::doctor {
namespace {

// Whether the rendezvous address resolves, and is free to listen on (this
// node hosts it) or accepts connections (another node does).
Finding rendezvous_finding(const LaunchOptions& o) {
  const std::string where = join_host_port(o.rdzv_host, o.rdzv_port);
  if (!o.rdzv_given) return {"rendezvous", Status::kInfo, "one node: a free local port", ""};
  std::string ip;
  try {
    ip = resolve(o.rdzv_host);
  } catch (const Error& e) {
    return {"rendezvous", Status::kError, e.what(),
            "give --rdzv a host name this node resolves (or its IP address)"};
  }
  if (is_local_address(ip)) {
    try {
      check_bindable(ip, o.rdzv_port);
    } catch (const Error& e) {
      return {"rendezvous", Status::kError, where + ": " + e.what(),
              "this node hosts the rendezvous, but cannot listen there: stop what holds the "
              "port, or pick another --rdzv port"};
    }
    return {"rendezvous", Status::kOk, where + " (" + ip + ") is this node's; the port is free",
            ""};
  }
  if (!accepts_tcp(ip, o.rdzv_port, 2000)) {
    return {"rendezvous", Status::kWarn, where + " (" + ip + ") accepts no connection",
            "start dtrun on the rendezvous host first; if it runs, a firewall is in the way "
            "(the port must be open between the nodes)"};
  }
  return {"rendezvous", Status::kOk, where + " (" + ip + ") accepts connections", ""};
}

}  // namespace

int run_doctor(const LaunchOptions& options, const EnvMap& env) {
  const Facts facts = gather_facts(env);
  std::vector<Finding> findings =
      evaluate(facts, JobShape{.nproc_per_node = options.nproc_per_node, .nnodes = options.nnodes});
  findings.push_back(rendezvous_finding(options));
  int errors = 0, warnings = 0;
  std::size_t width = 5;
  for (const Finding& f : findings) {
    errors += f.status == Status::kError;
    warnings += f.status == Status::kWarn;
    width = std::max(width, f.check.size());
  }
  std::printf("dtrun doctor on %s: %zu checks, %d errors, %d warnings\n\n", facts.host.c_str(),
              findings.size(), errors, warnings);
  std::printf("%-*s  %-6s %s\n", static_cast<int>(width), "check", "status", "found");
  for (const Finding& f : findings) {
    std::printf("%-*s  %-6s %s\n", static_cast<int>(width), f.check.c_str(), status_name(f.status),
                f.found.c_str());
  }
  bool any = false;
  for (const Finding& f : findings) {
    if (f.advice.empty()) continue;
    if (!any) std::printf("\nadvice:\n");
    any = true;
    std::printf("  %s %s: %s\n", status_name(f.status), f.check.c_str(), f.advice.c_str());
  }
  std::fflush(stdout);
  return errors > 0 ? 1 : 0;
}

}  // namespace rtd::launcher::doctor
