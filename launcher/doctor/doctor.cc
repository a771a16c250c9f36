// dtrun doctor: gather, judge, print (doctor.h).
#include "launcher/doctor/doctor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>

#include "launcher/doctor/checks.h"
#include "launcher/doctor/facts.h"
#include "launcher/nccl_settings.h"
#include "launcher/net.h"
#include "launcher/placement.h"
#include "launcher/settings_exchange.h"
#include "launcher/supervisor.h"
#include "rt_dist/error.h"
#include "rt_dist/store.h"
#include "runtime/core/store/grpc_store.h"

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

// Whether the program (when given) is one dtrun can start, found as the job
// would find it (a path, or a name on PATH).
std::optional<Finding> program_finding(const LaunchOptions& o, const EnvMap& env) {
  if (o.program.empty()) return std::nullopt;
  auto path = env.find("PATH");
  try {
    return Finding{"program", Status::kOk,
                   resolve_program(o.program, path == env.end() ? "" : path->second), ""};
  } catch (const Error& e) {
    return Finding{"program", Status::kError, e.what(),
                   "the job would stop before starting any worker: name an executable file (a "
                   "path, or a program on PATH)"};
  }
}

// Findings as text for the store: a line per finding, its fields split by tabs.
std::string encode(const std::vector<Finding>& findings) {
  auto clean = [](std::string t) {
    for (char& c : t)
      if (c == '\t' || c == '\n') c = ' ';
    return t;
  };
  std::string out;
  for (const Finding& f : findings) {
    out += clean(f.check) + "\t" + std::to_string(static_cast<int>(f.status)) + "\t" +
           clean(f.found) + "\t" + clean(f.advice) + "\n";
  }
  return out;
}

std::vector<Finding> decode(const std::string& text) {
  std::vector<Finding> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::stringstream parts(line);
    for (std::string field; std::getline(parts, field, '\t');) fields.push_back(field);
    fields.resize(4);
    out.push_back(
        {fields[0], static_cast<Status>(std::atoi(fields[1].c_str())), fields[2], fields[3]});
  }
  return out;
}

struct NodeReport {
  std::string host;
  std::vector<Finding> findings;
};

// The table: a line per check and node (the node column only across nodes),
// then the advice. Returns the number of errors.
int print_report(const std::vector<NodeReport>& nodes, bool across) {
  int errors = 0, warnings = 0;
  std::size_t width = 5, checks = 0;
  for (const NodeReport& n : nodes) {
    checks = std::max(checks, n.findings.size());
    for (const Finding& f : n.findings) {
      errors += f.status == Status::kError;
      warnings += f.status == Status::kWarn;
      width = std::max(width, f.check.size());
    }
  }
  if (across) {
    std::printf("dtrun doctor across %zu nodes:", nodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) std::printf(" %zu=%s", i, nodes[i].host.c_str());
    std::printf("; %d errors, %d warnings\n\n", errors, warnings);
    std::printf("%-*s  node %-6s %s\n", static_cast<int>(width), "check", "status", "found");
  } else {
    std::printf("dtrun doctor on %s: %zu checks, %d errors, %d warnings\n\n", nodes[0].host.c_str(),
                checks, errors, warnings);
    std::printf("%-*s  %-6s %s\n", static_cast<int>(width), "check", "status", "found");
  }
  // Checks in node 0's order; each node's line under it.
  for (std::size_t c = 0; c < checks; ++c) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (c >= nodes[i].findings.size()) continue;
      const Finding& f = nodes[i].findings[c];
      const char* name = i == 0 || !across ? f.check.c_str() : "";
      if (across)
        std::printf("%-*s  %-4zu %-6s %s\n", static_cast<int>(width), name, i,
                    status_name(f.status), f.found.c_str());
      else
        std::printf("%-*s  %-6s %s\n", static_cast<int>(width), name, status_name(f.status),
                    f.found.c_str());
    }
  }
  bool any = false;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    for (const Finding& f : nodes[i].findings) {
      if (f.advice.empty()) continue;
      if (!any) std::printf("\nadvice:\n");
      any = true;
      std::printf("  %s%s %s: %s\n", across ? ("node " + std::to_string(i) + " ").c_str() : "",
                  status_name(f.status), f.check.c_str(), f.advice.c_str());
    }
  }
  std::fflush(stdout);
  return errors;
}

// Across nodes: a rendezvous as a job's (the same flags), the nodes' settings
// compared as at a job's start, and every node's findings to node 0, which
// prints them all; the others print their own.
int run_across(const LaunchOptions& o, const EnvMap& env, Facts& facts,
               const std::vector<std::pair<std::string, std::string>>& overrides,
               std::vector<Finding> findings) {
  // An address that does not resolve ends it here; a port in use on this
  // host may be another node's doctor hosting (two nodes on one host).
  const Finding address = rendezvous_finding(o);
  if (address.status == Status::kError &&
      address.advice.find("pick another") == std::string::npos) {
    findings.push_back(address);
    return print_report({{facts.host, findings}}, false) > 0 ? 1 : 0;
  }
  Placement p;
  try {
    p = rendezvous(o);
  } catch (const Error& e) {
    findings.push_back({"rendezvous", Status::kError, e.what(),
                        "start dtrun doctor with the same flags on every node; if something "
                        "else holds the port, stop it or pick another --rdzv port"});
    return print_report({{facts.host, findings}}, false) > 0 ? 1 : 0;
  }
  const int node = p.layout.node_rank(), nnodes = p.layout.nnodes();
  findings.push_back(
      {"rendezvous", Status::kOk,
       "node " + std::to_string(node) + " of " + std::to_string(nnodes) + " at " + p.store_addr,
       ""});
  auto store = make_grpc_store(p.store_addr, o.token, p.layout.agent_secret(), o.tls)
                   ->bounded(std::chrono::seconds(60));
  const SettingsVerdict verdict = check_settings_across_nodes(
      *store, p.layout.round(), node, nnodes,
      effective_settings(env, overrides, facts.nccl_version), p.host, std::chrono::seconds(60));
  if (!verdict.error.empty()) {
    findings.push_back({"settings across nodes", Status::kError, verdict.error,
                        "set the NCCL values alike on every node"});
  } else if (!verdict.warnings.empty()) {
    std::string all;
    for (const auto& w : verdict.warnings) all += (all.empty() ? "" : "; ") + w;
    findings.push_back({"settings across nodes", Status::kWarn, all,
                        "fine if the nodes differ on purpose; else set them alike"});
  } else {
    findings.push_back(
        {"settings across nodes", Status::kOk, "NCCL_*, RTD_* and versions agree", ""});
  }
  const std::string prefix = "dtrun/doctor/";
  store->set(prefix + "node/" + std::to_string(node), facts.host + "\n" + encode(findings));
  if (node != 0) {
    const int errors = print_report({{facts.host, findings}}, false);
    // Node 0 says whether any node has an error: every node exits alike (and
    // --bench runs on all of them or on none).
    const std::string job_errors = store->get(prefix + "printed", std::chrono::seconds(60));
    std::printf("\n(reported to node 0; %s)\n",
                job_errors == "0" ? "no node has an error" : "some node has errors: see node 0");
    std::fflush(stdout);
    store->set(prefix + "bye/" + std::to_string(node), "1");
    return errors > 0 || job_errors != "0" ? 1 : 0;
  }
  std::vector<NodeReport> nodes;
  for (int r = 0; r < nnodes; ++r) {
    const std::string text =
        store->get(prefix + "node/" + std::to_string(r), std::chrono::seconds(60));
    const auto newline = text.find('\n');
    nodes.push_back({text.substr(0, newline), decode(text.substr(newline + 1))});
  }
  const int errors = print_report(nodes, true);
  store->set(prefix + "printed", std::to_string(errors));
  for (int r = 1; r < nnodes; ++r)
    store->get(prefix + "bye/" + std::to_string(r), std::chrono::seconds(10));
  return errors > 0 ? 1 : 0;
}

}  // namespace

int run_doctor(const LaunchOptions& options, const EnvMap& env) {
  Facts facts = gather_facts(env);
  // What the workers would see: --env and the NCCL preset's values too.
  std::vector<std::pair<std::string, std::string>> overrides = options.env;
  NcclPreset preset = NcclPreset::kNone;
  parse_nccl_preset(options.nccl_preset, &preset);
  apply_preset(preset, facts, env, overrides);
  for (const auto& [k, v] : overrides)
    if (is_node_setting(k)) facts.env[k] = v;
  std::vector<Finding> findings =
      evaluate(facts, JobShape{.nproc_per_node = options.nproc_per_node, .nnodes = options.nnodes});
  if (auto program = program_finding(options, env)) findings.push_back(*program);
  if (options.nnodes > 1 && options.rdzv_given) {
    try {
      return run_across(options, env, facts, overrides, findings);
    } catch (const Error& e) {
      findings.push_back({"across nodes", Status::kError, e.what(),
                          "every node must run dtrun doctor with the same flags"});
      return print_report({{facts.host, findings}}, false) > 0 ? 1 : 0;
    }
  }
  findings.push_back(rendezvous_finding(options));
  return print_report({{facts.host, findings}}, false) > 0 ? 1 : 0;
}

}  // namespace rtd::launcher::doctor
