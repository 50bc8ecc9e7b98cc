// One read in flight behind the compute thread: the streamed FFN hands a
// planned list of reads (and the checksum work for what they bring) to
// this pipeline's own thread and goes on computing on what it already has;
// Wait() joins when it needs the bytes. The loader and the verification
// run off the compute thread, so a token's time approaches its reads'.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "src/runtime/loader.h"

namespace sparrow {

class ReadPipeline {
 public:
  struct Result {
    ReadTotals totals;
    double read_seconds = 0;   // inside Loader::ReadAll: the device's time (and
                               // whatever `landed` work the reads could not hide)
    double after_seconds = 0;  // the `after` work (checksums), also off the compute thread
  };

  explicit ReadPipeline(Loader& loader);
  ~ReadPipeline();  // waits for a read in flight, then stops the thread
  ReadPipeline(const ReadPipeline&) = delete;
  ReadPipeline& operator=(const ReadPipeline&) = delete;

  // Starts ReadAll(*ops, landed) and then after() on the pipeline's thread
  // (`landed` hears of each piece as it lands, on the loader's threads).
  // `ops` and whatever `after` and `landed` touch must stay untouched until
  // Wait() returns.
  // At most one read in flight: Start while one is (not yet waited for) is
  // a caller bug (std::logic_error).
  void Start(const std::vector<ReadOp>* ops, std::function<void()> after,
             LandedFn landed = nullptr);
  // Blocks until the read started last is done; rethrows what it threw
  // (an InputError for an I/O error, a short read or a bad checksum).
  Result Wait();
  bool busy() const { return in_flight_; }

 private:
  void Run();

  Loader& loader_;
  std::mutex mutex_;
  std::condition_variable wake_;  // the thread: work arrived or stop
  std::condition_variable done_;  // the caller: the work is finished
  const std::vector<ReadOp>* ops_ = nullptr;
  std::function<void()> after_;
  LandedFn landed_;
  bool has_work_ = false, finished_ = false, stop_ = false;
  bool in_flight_ = false;  // started and not yet waited for (caller's side)
  Result result_;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace sparrow
