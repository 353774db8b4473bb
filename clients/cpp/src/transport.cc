// gRPC channels to Sluice servers (plaintext HTTP/2 or TLS), time, ids.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "internal.h"

namespace sluice {
namespace detail {

double steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double system_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void set_deadline(grpc::ClientContext& ctx, double timeout_seconds) {
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::duration<double>(std::max(0.0, std::min(timeout_seconds, 1e7)))));
}

std::vector<std::string> split_addresses(const std::string& addresses) {
  std::vector<std::string> out;
  std::stringstream ss(addresses);
  std::string a;
  while (std::getline(ss, a, ',')) {
    auto b = a.find_first_not_of(" \t");
    auto e = a.find_last_not_of(" \t");
    if (b == std::string::npos) continue;
    a = a.substr(b, e - b + 1);
    auto scheme = a.find("://");
    if (scheme != std::string::npos) a = a.substr(scheme + 3);
    out.push_back(a);
  }
  if (out.empty()) throw InvalidArgument("no server address");
  return out;
}

Channels::Channels(const std::optional<TLS>& tls) {
  args_.SetInt("grpc.enable_retries", 0);
  if (tls) {
    if (tls->certificate_chain.empty() != tls->private_key.empty()) {
      throw InvalidArgument("TLS: certificate_chain and private_key go together");
    }
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = tls->root_certificates;
    o.pem_cert_chain = tls->certificate_chain;
    o.pem_private_key = tls->private_key;
    creds_ = grpc::SslCredentials(o);
    if (!tls->server_name.empty()) args_.SetSslTargetNameOverride(tls->server_name);
  } else {
    creds_ = grpc::InsecureChannelCredentials();
  }
}

std::shared_ptr<grpc::Channel> Channels::get(const std::string& addr) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = channels_.find(addr);
  if (it != channels_.end()) return it->second;
  auto ch = grpc::CreateCustomChannel(addr, creds_, args_);
  channels_[addr] = ch;
  return ch;
}

namespace {
thread_local std::mt19937_64 rng{std::random_device{}()};
}

double jitter01() { return std::uniform_real_distribution<double>(0, 1)(rng); }

double Retry::failed(double u) {
  ++failures_;
  double d = std::min(lo_ * std::pow(2.0, std::min(failures_ - 1, 20)), hi_);
  d = d / 2 + u * d / 2;
  if (interval_ > 0) d = std::min(d, interval_);
  return d;
}

void Retry::succeeded(double interval) {
  failures_ = 0;
  interval_ = std::max(std::min(interval, hi_), lo_);
}

}  // namespace detail

namespace {
std::string read_file(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InvalidArgument("TLS: cannot read " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

TLS TLS::from_files(const std::string& ca_file, const std::string& cert_file, const std::string& key_file) {
  TLS t;
  t.root_certificates = read_file(ca_file);
  t.certificate_chain = read_file(cert_file);
  t.private_key = read_file(key_file);
  return t;
}

std::string new_client_id() {
  static std::atomic<int64_t> seq{0};
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == 0) std::snprintf(host, sizeof host, "unknown");
  return std::string(host) + ":" + std::to_string(getpid()) + ":" + std::to_string(++seq);
}

}  // namespace sluice
