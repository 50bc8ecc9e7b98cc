#include "src/runtime/read_pipeline.h"

#include <stdexcept>

#include "base/timer.h"

namespace sparrow {

ReadPipeline::ReadPipeline(Loader& loader) : loader_(loader), thread_([this] { Run(); }) {}

ReadPipeline::~ReadPipeline() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return !has_work_; });
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void ReadPipeline::Start(const std::vector<ReadOp>* ops, std::function<void()> after,
                         LandedFn landed) {
  if (in_flight_) throw std::logic_error("ReadPipeline::Start with a read in flight");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ops_ = ops;
    after_ = std::move(after);
    landed_ = std::move(landed);
    has_work_ = true;
    finished_ = false;
    error_ = nullptr;
  }
  in_flight_ = true;
  wake_.notify_one();
}

ReadPipeline::Result ReadPipeline::Wait() {
  if (!in_flight_) throw std::logic_error("ReadPipeline::Wait with no read in flight");
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return finished_; });
  in_flight_ = false;
  if (error_) std::rethrow_exception(error_);
  return result_;
}

void ReadPipeline::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return has_work_ || stop_; });
    if (!has_work_) return;  // stop_, nothing pending
    const std::vector<ReadOp>* ops = ops_;
    std::function<void()> after = std::move(after_);
    const LandedFn landed = std::move(landed_);
    lock.unlock();
    Result result;
    std::exception_ptr error;
    try {
      const double start = NowSeconds();
      result.totals = loader_.ReadAll(*ops, landed);
      const double read = NowSeconds();
      result.read_seconds = read - start;
      if (after) after();
      result.after_seconds = NowSeconds() - read;
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    result_ = result;
    error_ = error;
    has_work_ = false;
    finished_ = true;
    done_.notify_all();
  }
}

}  // namespace sparrow
