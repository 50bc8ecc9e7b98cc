// `sparrow <command> [flags]`. Exit status: 0 ok; 2 bad input (one line on
// stderr); 1 internal error or output that could not be written.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <exception>
#include <new>
#include <string>

#include <cxxopts.hpp>

#include "base/error.h"
#include "base/heap_release.h"
#include "simd/targets.h"
#include "sparrow_config.h"
#include "src/cli/commands.h"

namespace {

struct CommandEntry {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr CommandEntry kCommands[] = {
    {"run", sparrow::cli::RunCommand, "generate text from a prompt"},
    {"batch", sparrow::cli::BatchCommand,
     "generate text for every prompt of a JSONL file, a block at a time"},
    {"chat", sparrow::cli::ChatCommand, "chat with an instruction-tuned model"},
    {"serve", sparrow::cli::ServeCommand, "serve a model over an OpenAI-compatible HTTP API"},
    {"perplexity", sparrow::cli::PerplexityCommand,
     "perplexity of a text file (llama.cpp's method)"},
    {"bench", sparrow::cli::BenchCommand,
     "prompt and generation throughput, like llama-bench"},
    {"synth-lora", sparrow::cli::SynthLoraCommand,
     "write a random LoRA adapter for a base model (testing --lora)"},
    {"synth", sparrow::cli::SynthCommand,
     "write a llama GGUF with random weights of any shape and type"},
    {"info", sparrow::cli::InfoCommand,
     "metadata, tensors, types, sizes and the SIMD target in use"},
    {"convert", sparrow::cli::ConvertCommand,
     "convert a GGUF model into a bundle that streams its feed-forward from disk"},
    {"probe-io", sparrow::cli::ProbeIoCommand,
     "random-read throughput of a disk by read size and parallelism"},
    {"simulate", sparrow::cli::SimulateCommand,
     "predict decode tok/s on a device profile from a --stats-json trace"},
    {"tradeoff", sparrow::cli::TradeoffCommand,
     "perplexity vs speed for each sparsity policy and density (CSV, SVG)"},
    {"calibrate", sparrow::cli::CalibrateCommand,
     "find and store the input/down split of dip's density with the lowest perplexity"},
    {"place", sparrow::cli::PlaceCommand,
     "write a copy of a bundle with co-activated units next to each other on disk"},
};

void PrintUsage(std::FILE* out) {
  std::fprintf(out, "sparrow %s: LLM inference on CPUs, from DRAM or flash\n\n",
               SPARROW_VERSION);
  std::fprintf(out, "usage: sparrow <command> [options]   (sparrow <command> --help for options)\n\ncommands:\n");
  for (const CommandEntry& c : kCommands) {
    std::fprintf(out, "  %-12s %s\n", c.name, c.summary);
  }
  std::fprintf(out,
               "\nexit status: 0 ok, 2 bad input (message on stderr), 1 internal error or failed output\n"
               "environment: SPARROW_SIMD_TARGET=<name> forces a SIMD target (see `sparrow info`);\n"
               "  SPARROW_PREFETCH=software|hardware forces how decode kernels prefetch their rows\n");
}

// Messages go out as one line, whatever the exception text holds.
void PrintError(const char* prefix, const std::string& message) {
  std::string line = message;
  for (char& ch : line) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  std::fprintf(stderr, "%s%s\n", prefix, line.c_str());
}

// Standard output is a result: a write that failed (a full disk, /dev/full,
// a pipe whose reader left while SIGPIPE is ignored) fails the run, with the
// reason, instead of losing the output quietly. With SIGPIPE at its default,
// `| head` still ends the process the usual Unix way.
int FinishStandardOutput(int status) {
  std::cout.flush();
  errno = 0;
  bool failed = std::fflush(stdout) != 0;
  int err = errno;
  failed = std::ferror(stdout) != 0 || failed;
  if (std::fclose(stdout) != 0 && !failed) {
    failed = true;
    err = errno;
  }
  if (!failed) return status;
  PrintError("error: ", std::string("cannot write to standard output") +
                            (err != 0 ? std::string(": ") + std::strerror(err) : "") +
                            "; the output is incomplete");
  return status == 0 ? 1 : status;
}

int RunCommand(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    PrintUsage(stdout);
    return 0;
  }
  if (command == "--version") {
    std::printf("sparrow %s\n", SPARROW_VERSION);
    return 0;
  }
  for (const CommandEntry& c : kCommands) {
    if (command != c.name) continue;
    try {
      sparrow::simd::ApplyTargetFromEnvironment();
      return c.run(argc - 1, argv + 1);
    } catch (const sparrow::InputError& e) {
      PrintError("error: ", e.what());
      return 2;
    } catch (const cxxopts::exceptions::exception& e) {
      PrintError("error: ", std::string(e.what()) + " (see sparrow " + command + " --help)");
      return 2;
    } catch (const std::bad_alloc&) {
      PrintError("error: ", "out of memory");
      return 1;
    } catch (const std::exception& e) {
      PrintError("internal error: ", e.what());
      return 1;
    }
  }
  PrintError("error: ", "unknown command '" + command + "' (try sparrow --help)");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  sparrow::ReturnLargeBlocksOnFree();  // before the first model's buffers
  return FinishStandardOutput(RunCommand(argc, argv));
}
