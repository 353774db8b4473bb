// C++'s interop driver: the cross-language interop suite's JSON-lines
// protocol (interop/doc.go; docs/cpp.md, "The interop driver") over the
// sluice library.
//
//   scripts/interop-driver cpp --server 127.0.0.1:15000 --client-id cpp-1 [--tls-ca F [--tls-cert F --tls-key F]]
//
// It reads one JSON object per line on standard input and writes one JSON
// object per line answering it, in order, on standard output; logs go to
// standard error. Any failure answers {"error":{"code":CODE,"message":...}}
// with CODE a gRPC code's name, and the driver keeps serving; "close" closes
// the client and exits 0, as does the end of standard input.
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "sluice/sluice.h"

using json = nlohmann::json;

namespace {

// kBurstSeconds is the burst of every rate limiter the driver binds to a
// lease (the interop suite's bound on what a run may take).
constexpr double kBurstSeconds = 0.1;

// Failure is an error answer: a gRPC code's name and a message.
struct Failure {
  std::string code, message;
};

class Driver {
 public:
  explicit Driver(sluice::Client& c) : client_(c) {}

  json Do(const json& cmd) {
    std::string op = cmd.contains("op") && cmd["op"].is_string() ? cmd["op"].get<std::string>() : "";
    if (op == "resource") {
      std::string id = str(cmd, "id");
      if (res_.count(id)) throw Failure{"ALREADY_EXISTS", "resource '" + id + "' is leased already (use set_wants)"};
      if (!cmd.contains("wants")) throw Failure{"INVALID_ARGUMENT", "resource: no wants"};
      auto r = std::make_unique<sluice::Resource>(client_.resource(id, num(cmd, "wants")));
      limiters_[id] = r->rate_limiter(kBurstSeconds);
      res_[id] = std::move(r);
      return {{"ok", true}};
    }
    if (op == "set_wants") {
      auto& r = resource(cmd);
      if (!cmd.contains("wants")) throw Failure{"INVALID_ARGUMENT", "set_wants: no wants"};
      r.set_wants(num(cmd, "wants"));
      return {{"ok", true}};
    }
    if (op == "capacity") {
      double c = resource(cmd).capacity();
      return {{"capacity", std::isinf(c) ? -1.0 : c}};
    }
    if (op == "run") {
      resource(cmd);
      double seconds = cmd.contains("seconds") ? num(cmd, "seconds") : 0;
      if (!(seconds >= 0 && seconds <= 600)) throw Failure{"INVALID_ARGUMENT", "run: seconds outside [0, 600]"};
      auto& lim = *limiters_[cmd["id"].get<std::string>()];
      auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                               std::chrono::duration<double>(seconds));
      int64_t n = 0;
      for (;;) {
        try {
          lim.acquire_until(1, deadline);
        } catch (const sluice::DeadlineExceeded&) {
          break;
        }
        ++n;
      }
      return {{"acquired", n}};
    }
    if (op == "release") {
      std::string id = str(cmd, "id");
      resource(cmd);
      auto r = std::move(res_[id]);
      res_.erase(id);
      limiters_.erase(id);
      r->release();
      return {{"ok", true}};
    }
    if (op == "allow") {
      sluice::AllowRequest a;
      a.resource = opt_str(cmd, "resource");
      a.domain = opt_str(cmd, "domain");
      a.tokens = 1;
      if (cmd.contains("tokens") && cmd["tokens"].is_number()) a.tokens = std::max<int64_t>(cmd["tokens"].get<int64_t>(), 1);
      a.max_wait = sluice::Seconds(0);
      auto got = client_.allow(a);
      return {{"status", got.status}, {"granted", got.granted}};
    }
    if (op == "reserve") {
      sluice::ReserveRequest r;
      r.resource = opt_str(cmd, "resource");
      r.domain = opt_str(cmd, "domain");
      r.copies = cmd.contains("copies") ? integer(cmd, "copies") : 1;
      r.min_copies = cmd.contains("min") ? integer(cmd, "min") : 0;
      sluice::Hold h;
      try {
        h = client_.reserve_copies(r);
      } catch (const sluice::OverLimit&) {
        return {{"granted", 0}, {"hold", nullptr}};
      }
      int64_t id = ++next_hold_;
      int64_t granted = h.copies();
      holds_[id] = std::move(h);
      return {{"granted", granted}, {"hold", id}};
    }
    if (op == "free") {
      if (!cmd.contains("hold") || !cmd["hold"].is_number_integer()) throw Failure{"NOT_FOUND", "free: no such hold"};
      auto it = holds_.find(cmd["hold"].get<int64_t>());
      if (it == holds_.end()) throw Failure{"NOT_FOUND", "free: no such hold"};
      sluice::Hold h = std::move(it->second);
      holds_.erase(it);
      h.release();
      return {{"ok", true}};
    }
    if (op == "close") {
      client_.close();
      return {{"ok", true}};
    }
    throw Failure{"INVALID_ARGUMENT", "unknown op '" + op + "'"};
  }

 private:
  static std::string str(const json& cmd, const char* k) {
    if (!cmd.contains(k) || !cmd[k].is_string()) throw Failure{"INVALID_ARGUMENT", std::string(k) + ": not a string"};
    return cmd[k].get<std::string>();
  }
  static std::string opt_str(const json& cmd, const char* k) {
    return cmd.contains(k) && cmd[k].is_string() ? cmd[k].get<std::string>() : "";
  }
  static double num(const json& cmd, const char* k) {
    if (!cmd[k].is_number()) throw Failure{"INVALID_ARGUMENT", std::string(k) + ": not a number"};
    return cmd[k].get<double>();
  }
  static int64_t integer(const json& cmd, const char* k) {
    if (!cmd[k].is_number_integer()) throw Failure{"INVALID_ARGUMENT", std::string(k) + ": not an integer"};
    return cmd[k].get<int64_t>();
  }
  sluice::Resource& resource(const json& cmd) {
    std::string id = cmd.contains("id") && cmd["id"].is_string() ? cmd["id"].get<std::string>() : "";
    auto it = res_.find(id);
    if (it == res_.end()) throw Failure{"NOT_FOUND", "no resource '" + id + "' (send resource first)"};
    return *it->second;
  }

  sluice::Client& client_;
  std::map<std::string, std::unique_ptr<sluice::Resource>> res_;
  std::map<std::string, std::shared_ptr<sluice::RateLimiter>> limiters_;
  std::map<int64_t, sluice::Hold> holds_;
  int64_t next_hold_ = 0;
};

json error_answer(const std::string& code, const std::string& message) {
  return {{"error", {{"code", code}, {"message", message}}}};
}

int usage() {
  std::cerr << "usage: driver --server HOST:PORT --client-id ID [--tls-ca F [--tls-cert F --tls-key F]]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string server, id, ca, cert, key;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    bool ok = true;
    if (a == "--server") {
      ok = value(&server);
    } else if (a == "--client-id") {
      ok = value(&id);
    } else if (a == "--tls-ca") {
      ok = value(&ca);
    } else if (a == "--tls-cert") {
      ok = value(&cert);
    } else if (a == "--tls-key") {
      ok = value(&key);
    } else {
      ok = false;
    }
    if (!ok) return usage();
  }
  if (server.empty() || id.empty()) return usage();

  sluice::Options o;
  o.client_id = id;
  o.call_timeout = sluice::Seconds(5);
  o.session_ttl = sluice::Seconds(5);
  o.fail_open = false;
  if (!ca.empty()) o.tls = sluice::TLS::from_files(ca, cert, key);
  sluice::Client client(server, o);
  {
    Driver d(client);
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json out;
      std::string op;
      try {
        json cmd = json::parse(line);
        if (!cmd.is_object()) throw Failure{"INVALID_ARGUMENT", "a command is a JSON object"};
        if (cmd.contains("op") && cmd["op"].is_string()) op = cmd["op"].get<std::string>();
        out = d.Do(cmd);
      } catch (const json::parse_error& e) {
        out = error_answer("INVALID_ARGUMENT", std::string("not a JSON command: ") + e.what());
      } catch (const Failure& f) {
        out = error_answer(f.code, f.message);
      } catch (const sluice::Error& e) {
        out = error_answer(e.code_name(), e.message());
      } catch (const std::exception& e) {  // every failure is an answer; the driver keeps serving
        out = error_answer("UNKNOWN", e.what());
      }
      std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n" << std::flush;
      if (op == "close" && !out.contains("error")) return 0;
    }
  }
  client.close();
  return 0;
}
