// The client's background threads: joined, never detached (Worker), and
// the reaper that joins the threads that could not join themselves.
#include <iostream>

#include "internal.h"

namespace sluice {
namespace detail {
namespace {

// Reaper holds the threads handed over by Worker::join on themselves. Its
// destructor, at the process's exit, joins those left: a thread still in a
// callback of the application's then delays the exit until the callback
// returns.
class Reaper {
 public:
  struct Orphan {
    std::thread t;
    std::shared_ptr<std::atomic<bool>> done;
  };

  ~Reaper() {
    std::vector<Orphan> all;
    {
      std::lock_guard<std::mutex> l(mu_);
      all.swap(orphans_);
    }
    for (auto& o : all) {
      if (o.t.get_id() != std::this_thread::get_id()) o.t.join();
    }
  }

  void adopt(std::thread t, std::shared_ptr<std::atomic<bool>> done) {
    std::lock_guard<std::mutex> l(mu_);
    orphans_.push_back(Orphan{std::move(t), std::move(done)});
  }

  // reap joins the finished orphans, outside the lock: a thread finishing
  // may itself hand over a thread (its owner destroyed on it).
  void reap() {
    std::vector<Orphan> finished;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto it = orphans_.begin(); it != orphans_.end();) {
        if (it->done->load() && it->t.get_id() != std::this_thread::get_id()) {
          finished.push_back(std::move(*it));
          it = orphans_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& o : finished) o.t.join();
  }

  size_t pending() {
    std::lock_guard<std::mutex> l(mu_);
    return orphans_.size();
  }

 private:
  std::mutex mu_;
  std::vector<Orphan> orphans_;
};

// reaper is constructed by the first Client (Client's constructor reaps),
// so it is destroyed before gRPC's and protobuf's statics are.
Reaper& reaper() {
  static Reaper r;
  return r;
}

}  // namespace

Worker& Worker::operator=(Worker&& o) noexcept {
  if (this != &o) {
    join();
    t_ = std::move(o.t_);
    done_ = std::move(o.done_);
  }
  return *this;
}

void Worker::join() noexcept {
  if (!t_.joinable()) return;
  if (t_.get_id() == std::this_thread::get_id()) {
    try {
      reaper().adopt(std::move(t_), std::move(done_));
    } catch (const std::exception& e) {  // out of memory: the thread cannot be joined nor kept
      std::cerr << "sluice: cannot hand a finishing thread to the reaper: " << e.what() << "\n";
      std::terminate();
    }
    return;
  }
  try {
    t_.join();
  } catch (const std::system_error& e) {
    std::cerr << "sluice: joining a background thread: " << e.what() << "\n";
    std::terminate();
  }
  done_.reset();
}

void reap() noexcept {
  try {
    reaper().reap();
  } catch (const std::exception& e) {
    std::cerr << "sluice: joining finished threads: " << e.what() << "\n";
  }
}

size_t reaper_pending() { return reaper().pending(); }

}  // namespace detail
}  // namespace sluice
