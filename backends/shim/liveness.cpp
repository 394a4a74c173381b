// Heartbeats through the rendezvous store, so that a process of the group that stops
// answering (stopped by SIGSTOP or Ctrl-Z, frozen, or gone) can be named by the others
// when a collective times out, wherever it runs and whoever started it. Each process
// counts its own key up every interval from a thread of its own, on a store connection
// of its own; a stopped process's thread stops with it. Counters, not clocks, so that
// machines whose clocks differ agree.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include "shim.h"

static std::string beat_key(int rank) { return "pipeline/heartbeat/" + std::to_string(rank); }

// A client of the store at host:port whose operations give up after `timeout`.
static c10::intrusive_ptr<c10d::TCPStore> client(const std::string& host, int port,
                                                 std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

struct PipelineHeartbeat {
  std::mutex lock;
  std::condition_variable wake;
  bool stop = false;
  std::thread thread;
};

extern "C" {

// Starts counting `rank`'s key up every `interval_ms`. The thread ends at the first
// store operation that fails (the store is gone or does not answer): the others then
// learn nothing more from it, which is what they would learn from a stopped process.
const char* pipeline_heartbeat_start(const char* host, int port, int rank,
                                     int64_t interval_ms, PipelineHeartbeat** out) {
  return pipeline_guard([&] {
    auto interval = std::chrono::milliseconds(interval_ms);
    // At most a few intervals for one operation, so that stopping never waits long.
    auto store = client(host, port, 4 * interval);
    auto beat = new PipelineHeartbeat();
    std::string key = beat_key(rank);
    beat->thread = std::thread([beat, store, key, interval] {
      std::unique_lock<std::mutex> guard(beat->lock);
      while (!beat->stop) {
        guard.unlock();
        try {
          store->add(key, 1);
        } catch (...) {
          return;
        }
        guard.lock();
        beat->wake.wait_for(guard, interval, [beat] { return beat->stop; });
      }
    });
    *out = beat;
  });
}

// Stops the thread and frees the heartbeat.
void pipeline_heartbeat_stop(PipelineHeartbeat* beat) {
  {
    std::lock_guard<std::mutex> guard(beat->lock);
    beat->stop = true;
  }
  beat->wake.notify_all();
  if (beat->thread.joinable()) beat->thread.join();
  delete beat;
}

// Watches every rank's count for `window_ms` and sets `silent[r]` to 1 for each rank
// whose count did not move (this process's own `rank` never is). `*answered` is 0 when
// the store itself did not answer within the window: rank 0, which serves it, is then
// the one that stopped.
const char* pipeline_heartbeat_silent(const char* host, int port, int rank, int world,
                                      int64_t window_ms, int* silent, int* answered) {
  return pipeline_guard([&] {
    auto window = std::chrono::milliseconds(window_ms);
    std::vector<int64_t> before(world);
    *answered = 0;
    for (int r = 0; r < world; r++) silent[r] = 0;
    try {
      auto store = client(host, port, window);
      for (int r = 0; r < world; r++) before[r] = store->add(beat_key(r), 0);
      std::this_thread::sleep_for(window);
      for (int r = 0; r < world; r++) {
        silent[r] = r != rank && store->add(beat_key(r), 0) == before[r];
      }
      *answered = 1;
    } catch (...) {
      // The store did not answer: nothing is known of the others.
      for (int r = 0; r < world; r++) silent[r] = 0;
    }
  });
}
}
