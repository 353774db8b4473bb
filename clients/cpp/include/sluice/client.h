// sluice::Client: one per process, for Sluice's three client-side jobs —
// leases enforced locally (Resource, with a RateLimiter or a Gauge bound to
// it), server-side limits (Client::allow, Client::quota_allow) and
// copy-limited sessions (Client::reserve_copies, Hold) — with the Go
// client's behaviour (docs/client.md, docs/charon.md; the guide is
// docs/cpp.md).
//
// Errors are exceptions (sluice/errors.h): every one is a sluice::Error
// carrying the grpc::StatusCode.
//
// Source: doorman-design.md, "Client library"; charon-paper.md, sections
// 3.1, 3.2 and 4.3.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sluice/errors.h"
#include "sluice/ratelimit.h"

namespace sluice {

namespace detail {
class Channels;
class Leases;
class ResourceState;
struct HandleData;
class Sessions;
class Session;
struct Hooks;
struct Access;
}  // namespace detail

// kMinRequestInterval is Doorman's 5-second rule: a resource is never
// requested more often than this. Source: doorman-design.md, "Client
// operation".
inline constexpr Seconds kMinRequestInterval{5.0};
// kExpiryMargin is how long before a lease's expiry the client refreshes it
// at the latest.
inline constexpr Seconds kExpiryMargin{0.5};
// kMaxCopies is the most copies one request may ask for: 2^53.
inline constexpr int64_t kMaxCopies = int64_t{1} << 53;

// Mode is what a resource does while its lease has expired without renewal.
// Source: doorman-design.md, "Optimistic, pessimistic and safe mode
// operation".
enum class Mode {
  kSafe,         // the safe capacity the server last sent (0 before any; negative: no limit). The default.
  kPessimistic,  // as if capacity 0 was granted
  kOptimistic,   // as if what the resource wants was granted
};

// TLS holds the TLS (and mTLS) settings of a Client, as PEM text.
// root_certificates verify the servers (empty: the system's roots);
// certificate_chain and private_key, when set, are presented to a server
// that asks for a client certificate (mTLS); server_name overrides the name
// the server's certificate must carry.
struct TLS {
  std::string root_certificates;
  std::string certificate_chain;
  std::string private_key;
  std::string server_name;
  // from_files reads the PEM files named (an empty name: none); throws
  // InvalidArgument for a file it cannot read.
  static TLS from_files(const std::string& ca_file, const std::string& cert_file = "",
                        const std::string& key_file = "");
};

// Options configure a Client; every field has a default.
struct Options {
  // client_id names this client to the servers (empty: host:pid:n).
  std::string client_id;
  // tls turns on TLS (unset: plaintext HTTP/2).
  std::optional<TLS> tls;
  // mode is what a resource falls back to while its lease has expired.
  Mode mode = Mode::kSafe;
  // push keeps a sluice.v1.Leases/Watch stream open for leases pushed by
  // the server (false: poll only, as Doorman's clients).
  bool push = true;
  // call_timeout bounds each request of the limits and copies.
  Seconds call_timeout{1.0};
  // session_ttl is the ttl asked for the session holding copies.
  Seconds session_ttl{10.0};
  // fail_open: a reserve the server cannot answer is granted its minimum by
  // the client alone (a degraded Hold), as Charon's client did; false
  // throws Unavailable instead.
  bool fail_open = true;
  // backoff_unit is the unit of the copies retry policy's sleeps.
  Seconds backoff_unit{1.0};
  // on_session_lost(session_id, error) is called (on a keep-alive thread,
  // or the thread of the call that found the loss) when a session ends
  // without the client closing it. It may close or destroy the Client.
  std::function<void(const std::string&, const Error&)> on_session_lost;
};

// Lease is a lease held: capacity (the resource's unit) valid until expiry
// (Unix seconds), to be refreshed every refresh_interval.
struct Lease {
  double capacity = 0;
  double expiry = 0;
  Seconds refresh_interval{0};
};

// Resource is a handle on one leased resource of a Client: what this handle
// wants, the lease the client holds for it, and the capacity it may use
// now. Handles of one id in one process share one lease: their wants add
// up, and the lease is given back with the last handle. Destroying a
// handle releases it (RAII). Movable, not copyable; thread-safe.
// Source: doorman-design.md, "Client library".
class Resource {
 public:
  Resource(Resource&&) noexcept;
  Resource& operator=(Resource&&) noexcept;
  Resource(const Resource&) = delete;
  Resource& operator=(const Resource&) = delete;
  // The destructor releases the handle (errors are dropped: the server
  // lets an unreleased lease expire).
  ~Resource();

  const std::string& id() const;
  int64_t priority() const;
  // wants is what this handle asks for.
  double wants() const;
  // total_wants is what all of the resource's handles in this process ask
  // for together: what the client asks the server for.
  double total_wants() const;
  // capacity is what the resource may use now: its lease's capacity while
  // the lease is valid, else the fallback of its mode (0 once released;
  // kUnlimited with the kill switch on).
  double capacity() const;
  // lease is the lease held, if any and unexpired.
  std::optional<Lease> lease() const;
  // safe_capacity is the last safe capacity the server sent.
  std::optional<double> safe_capacity() const;

  // set_wants changes what this handle wants; the client asks the server
  // for the sum over the resource's handles at once, or, inside the 5 s
  // window of the last request, when the window ends. Throws
  // InvalidArgument unless wants is finite and >= 0, Closed once released.
  void set_wants(double wants);

  // on_change calls listener(capacity) now and whenever the capacity
  // changes. It runs on the thread that made the change (the refresh thread
  // for leases), never under the client's locks, one call at a time per
  // resource, newest value last; it should return promptly. It may
  // release handles, and close or destroy the Client (see Client::close).
  void on_change(std::function<void(double)> listener);

  // rate_limiter is a SmoothBursty RateLimiter whose rate (permits per
  // second) follows this resource's capacity from the moment it changes.
  // max_burst_seconds (0 to 1) is how many seconds of unused permits it
  // may store. It stays bound while the returned pointer lives.
  std::shared_ptr<RateLimiter> rate_limiter(double max_burst_seconds = 1.0);
  // gauge is a Gauge whose capacity follows this resource's: at most
  // floor(capacity) in flight.
  std::shared_ptr<Gauge> gauge();

  // release releases this handle. With the resource's last handle the lease
  // is given back to the server (ReleaseCapacity within timeout) and the
  // capacity becomes 0. Releasing twice does nothing. Throws the Error of a
  // failed ReleaseCapacity (the lease is dropped here all the same).
  void release(Seconds timeout = Seconds(2.0));

 private:
  friend class detail::Leases;
  Resource(std::shared_ptr<detail::Leases> leases, std::shared_ptr<detail::ResourceState> state,
           std::shared_ptr<detail::HandleData> handle);
  std::shared_ptr<detail::Leases> leases_;
  std::shared_ptr<detail::ResourceState> state_;
  std::shared_ptr<detail::HandleData> handle_;
};

// Allowance is the answer of sluice.v1.Limits/Allow. status is the server's
// status name: "OK", "REJECTED_TIMEOUT" (not enough tokens within the
// maximum wait), "REJECTED_NO_BUCKET", "REJECTED_TOO_MANY_BUCKETS",
// "REJECTED_TOO_MANY_TOKENS_REQUESTED". With OK, granted tokens are usable
// after wait. retry_after is set on a rejection that waiting can cure.
struct Allowance {
  std::string status;
  int64_t granted = 0;
  Seconds wait{0};
  std::optional<Seconds> retry_after;
  double remaining = 0;
  int64_t limit = 0;
  std::string bucket;
  bool ok() const { return status == "OK"; }
};

// AllowRequest is what Client::allow asks for: tokens of the bucket of
// (resource, domain), the most in [min_tokens, tokens] (0: all or
// nothing), waiting at most max_wait (unset: the bucket's wait timeout; it
// may lower it, never raise it); timeout bounds the call (unset: the call
// timeout).
struct AllowRequest {
  std::string resource;
  std::string domain;
  int64_t tokens = 1;
  int64_t min_tokens = 0;
  std::optional<Seconds> max_wait;
  std::optional<Seconds> timeout;
};

// QuotaAllowance is the answer of quotaservice.QuotaService/Allow.
struct QuotaAllowance {
  std::string status;  // "OK", "REJECTED_TIMEOUT", "REJECTED_NO_BUCKET", "REJECTED_INVALID_REQUEST", …
  int64_t granted = 0;
  Seconds wait{0};
  bool ok() const { return status == "OK"; }
};

// GroupHolds is one domain group's pool of a copy-limited resource.
struct GroupHolds {
  std::string name;
  int64_t limit = 0;
  int64_t holds = 0;
};

// Reservation is the context of the server's answer to a reserve.
struct Reservation {
  int64_t domain_limit = 0;
  std::optional<int64_t> global_limit;  // unset: unbounded
  int64_t domain_holds = 0;
  int64_t global_holds = 0;
  std::vector<GroupHolds> groups;
  bool unlimited = false;
};

// ReserveRequest is what Client::reserve_copies asks for: copies of a
// copy-limited resource for a domain, the most in [min_copies, copies]
// (0: all of them); on a rejection it asks again with Charon's retry
// policy until max_wait has passed (0: ask once); timeout bounds the whole
// call (unset: none).
struct ReserveRequest {
  std::string resource;
  std::string domain;
  int64_t copies = 1;
  int64_t min_copies = 0;
  Seconds max_wait{0};
  std::optional<Seconds> timeout;
};

// Hold is copies of a copy-limited resource held for a domain in the
// client's session (Client::reserve_copies, Client::seize), or granted by
// the client alone while the server could not be reached (degraded()).
// Destroying it releases what it still holds (RAII; errors are dropped —
// the server releases them at the latest when the session ends). Movable,
// not copyable; its methods are thread-safe and serialised.
// Source: charon-paper.md, sections 3.1 and 3.2 (implicit release).
class Hold {
 public:
  Hold();  // an empty hold: holds nothing
  Hold(Hold&&) noexcept;
  Hold& operator=(Hold&&) noexcept;
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  ~Hold();

  // copies is what is held now: granted or seized, less released or
  // transferred; 0 once the session has ended (or for an empty hold).
  int64_t copies() const;
  const std::string& resource() const;
  const std::string& domain() const;
  // degraded: granted by the client alone; the server holds nothing.
  bool degraded() const;
  // session_id is the id of the session holding the copies ("" when
  // degraded). Whoever knows it may release them: keep it private.
  std::string session_id() const;
  const Reservation& reservation() const;
  // attempts is how many Reserve requests it took; waited how long.
  int attempts() const;
  Seconds waited() const;
  explicit operator bool() const { return copies() > 0; }

  // release gives back copies of those held (unset: all; partial releases
  // allowed). Throws InvalidArgument for fewer than 1, FailedPrecondition
  // for more than held (nothing sent), SessionLost/Closed once the session
  // has ended, or the server's error (Unavailable: the copies stay counted
  // here and the server releases them when the session ends).
  void release(std::optional<int64_t> copies = std::nullopt, std::optional<Seconds> timeout = std::nullopt);
  // transfer stages copies for another session to seize (Client::seize,
  // usually in another process: send it the id) and returns the transfer
  // id. The copies leave this hold; the server releases them if nobody
  // seizes them within ttl (unset: the server's default, 30 s).
  std::string transfer(int64_t copies, std::optional<Seconds> ttl = std::nullopt,
                       std::optional<Seconds> timeout = std::nullopt);

  struct Data;  // opaque

 private:
  friend class detail::Sessions;
  explicit Hold(std::unique_ptr<Data> d);
  std::unique_ptr<Data> d_;
};

// new_client_id is a client id unique in this process and across hosts and
// processes: host:pid:n. Source: doorman-design.md, "Client identifier".
std::string new_client_id();

// Client is a client of Sluice servers: leases, server-side limits and
// copy-limited sessions. One per process; thread-safe. Not copyable or
// movable; its destructor closes it.
//
// addresses is "host:port" or several ("a:15000,b:15000"): the client
// talks to the first and moves on (to the master Discovery names, or the
// next address) when one fails or redirects it. Nothing is sent until used:
// the refresh thread starts with the first resource(), the session with the
// first reserve_copies().
class Client {
 public:
  // Client makes a client of addresses with options. Throws
  // InvalidArgument for no address, or a call_timeout, session_ttl or
  // backoff_unit that is not > 0.
  explicit Client(const std::string& addresses, Options options = {});
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  // The destructor closes the client (see close).
  ~Client();

  const std::string& id() const { return id_; }
  // server is the address the client talks to now.
  std::string server() const;

  // resource is a handle on resource_id asking for wants (permits per
  // second for a rate, slots for a gauge) in priority band priority (higher
  // is more important). The first handle of an id registers it and sends it
  // at once; until the first lease arrives its capacity is the fallback of
  // the mode. Throws InvalidArgument for an empty id or wants that are
  // negative or not finite, Closed once closed.
  Resource resource(const std::string& resource_id, double wants, int64_t priority = 0);

  // set_kill_switch: while on, every resource's capacity is kUnlimited
  // whatever the leases say (Charon's kill switch, section 4.3).
  void set_kill_switch(bool on);

  // allow asks sluice.v1.Limits/Allow. An over-limit answer is a status,
  // not an exception. Throws the server's Error (InvalidArgument naming the
  // field for a malformed request, Unavailable when it cannot decide or be
  // reached).
  Allowance allow(const AllowRequest& request);
  Allowance allow(const std::string& resource, const std::string& domain, int64_t tokens = 1);

  // quota_allow asks the quota service's quotaservice.QuotaService/Allow
  // for tokens of bucket in namespace (Square's protocol), waiting at most
  // max_wait (unset: the bucket's maximum wait). Every answer is a status;
  // RPC failures throw.
  QuotaAllowance quota_allow(const std::string& namespace_, const std::string& bucket, int64_t tokens = 1,
                             std::optional<Seconds> max_wait = std::nullopt);

  // reserve_copies holds copies in the client's session (opened on first
  // use, kept alive in the background). Throws OverLimit when not even
  // min_copies fit within max_wait (nothing held), InvalidArgument for
  // counts outside [1, 2^53], NotFound for an unknown resource,
  // FailedPrecondition for a rate-limited one, DeadlineExceeded past
  // timeout, Closed once closed; with fail_open, a server that cannot be
  // reached yields a degraded hold of min_copies.
  Hold reserve_copies(const ReserveRequest& request);
  Hold reserve_copies(const std::string& resource, const std::string& domain, int64_t copies = 1,
                      int64_t min_copies = 0);
  // seize takes the copies of a transfer (Hold::transfer) into the
  // client's session, once. Throws NotFound for a transfer that does not
  // exist, was seized already or expired.
  Hold seize(const std::string& transfer_id, std::optional<Seconds> timeout = std::nullopt);

  // close releases every lease (one ReleaseCapacity, best effort, within
  // timeout; every resource's capacity becomes 0), closes the session (the
  // server releases every copy it held), stops the background threads —
  // cancelling their calls in flight — and joins them. Closing twice does
  // nothing. It may be called from a callback the client runs (a listener,
  // on_session_lost): the thread running it is then joined once it
  // returns, by the next Client constructed or closed, or at the process's
  // exit.
  void close(Seconds timeout = Seconds(2.0));

 private:
  Client(const std::string& addresses, Options options, detail::Hooks hooks);
  void check_open() const;
  std::string id_;
  Options options_;
  std::shared_ptr<detail::Channels> channels_;
  std::shared_ptr<detail::Leases> leases_;
  std::shared_ptr<detail::Sessions> sessions_;
  std::atomic<bool> closed_{false};
  friend struct detail::Access;
};

}  // namespace sluice
