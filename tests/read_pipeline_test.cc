// The read pipeline against a scripted loader: reads and their `after`
// work run off the caller's thread, one at a time, in order; errors from
// the loader or from `after` come back from Wait(), and a caller that
// starts a second read before waiting for the first is told so.
#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "base/error.h"
#include "src/runtime/read_pipeline.h"

namespace sparrow {
namespace {

// Copies a byte pattern into each op's dest; may be told to fail, or to
// hold a read until released so a test can observe it in flight.
class ScriptedLoader : public Loader {
 public:
  using Loader::ReadAll;
  ReadTotals ReadAll(const std::vector<ReadOp>& ops, const LandedFn& landed) override {
    reader_thread = std::this_thread::get_id();
    ++calls;
    if (hold) released.get_future().wait();
    if (fail) ThrowInputError("scripted: read failed at offset 4096");
    ReadTotals t;
    for (const ReadOp& op : ops) {
      for (uint64_t i = 0; i < op.length; ++i) op.dest[i] = static_cast<uint8_t>(op.offset + i);
      if (landed) landed(op.dest, op.length);
      t.bytes += op.length;
      ++t.calls;
    }
    return t;
  }
  size_t alignment() const override { return 1; }
  IoMode mode() const override { return IoMode::kPread; }
  uint64_t memory_bytes() const override { return 0; }

  std::thread::id reader_thread;
  std::atomic<int> calls{0};
  bool fail = false, hold = false;
  std::promise<void> released;
};

TEST_CASE("read pipeline: reads and their checks run on another thread, results come back in order") {
  ScriptedLoader loader;
  ReadPipeline pipeline(loader);
  std::vector<uint8_t> a(100), b(50);
  std::vector<ReadOp> ops_a{{10, 60, a.data()}, {200, 40, a.data() + 60}};
  std::vector<ReadOp> ops_b{{7, 50, b.data()}};
  std::thread::id after_thread;
  int checked = 0;

  CHECK_FALSE(pipeline.busy());
  pipeline.Start(&ops_a, [&] {
    after_thread = std::this_thread::get_id();
    checked += a[0] == 10 && a[60] == 200 ? 1 : 0;  // after sees the bytes read
  });
  CHECK(pipeline.busy());
  ReadPipeline::Result r = pipeline.Wait();
  CHECK_FALSE(pipeline.busy());
  CHECK(r.totals.bytes == 100);
  CHECK(r.totals.calls == 2);
  CHECK(r.read_seconds >= 0);
  CHECK(r.after_seconds >= 0);
  CHECK(checked == 1);
  CHECK(loader.reader_thread != std::this_thread::get_id());
  CHECK(after_thread == loader.reader_thread);

  pipeline.Start(&ops_b, nullptr);  // no after work
  r = pipeline.Wait();
  CHECK(r.totals.bytes == 50);
  CHECK(b[49] == 56);
  CHECK(loader.calls == 2);
}

TEST_CASE("read pipeline: the caller computes while a read is in flight") {
  ScriptedLoader loader;
  loader.hold = true;
  ReadPipeline pipeline(loader);
  std::vector<uint8_t> buf(8);
  std::vector<ReadOp> ops{{0, 8, buf.data()}};
  pipeline.Start(&ops, nullptr);
  // Start returned although the read cannot finish until released.
  while (loader.calls == 0) std::this_thread::yield();
  CHECK(pipeline.busy());
  CHECK(buf[7] == 0);
  loader.released.set_value();
  CHECK(pipeline.Wait().totals.bytes == 8);
  CHECK(buf[7] == 7);
}

TEST_CASE("read pipeline: loader and checksum errors come back from Wait, and the pipeline goes on") {
  ScriptedLoader loader;
  ReadPipeline pipeline(loader);
  std::vector<uint8_t> buf(4);
  std::vector<ReadOp> ops{{0, 4, buf.data()}};

  loader.fail = true;
  pipeline.Start(&ops, [] { FAIL("after runs only when the read succeeded"); });
  CHECK_THROWS_WITH_AS(pipeline.Wait(), "scripted: read failed at offset 4096", InputError);
  CHECK_FALSE(pipeline.busy());

  loader.fail = false;
  pipeline.Start(&ops, [] { ThrowInputError("record 3 of group 0: checksum mismatch"); });
  CHECK_THROWS_WITH_AS(pipeline.Wait(), "record 3 of group 0: checksum mismatch", InputError);

  pipeline.Start(&ops, nullptr);
  CHECK(pipeline.Wait().totals.bytes == 4);
}

TEST_CASE("read pipeline: one read in flight; Wait without a read is a caller bug") {
  ScriptedLoader loader;
  ReadPipeline pipeline(loader);
  std::vector<uint8_t> buf(4);
  std::vector<ReadOp> ops{{0, 4, buf.data()}};
  CHECK_THROWS_AS(pipeline.Wait(), std::logic_error);
  pipeline.Start(&ops, nullptr);
  CHECK_THROWS_AS(pipeline.Start(&ops, nullptr), std::logic_error);
  CHECK(pipeline.Wait().totals.bytes == 4);
}

TEST_CASE("read pipeline: destroying it with a read in flight waits for the read") {
  ScriptedLoader loader;
  loader.hold = true;
  std::vector<uint8_t> buf(4);
  std::vector<ReadOp> ops{{0, 4, buf.data()}};
  std::thread releaser;
  {
    ReadPipeline pipeline(loader);
    pipeline.Start(&ops, nullptr);
    releaser = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      loader.released.set_value();
    });
  }  // must not return before the read wrote buf
  CHECK(buf[3] == 3);
  releaser.join();
}

}  // namespace
}  // namespace sparrow
