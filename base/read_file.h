// Whole files a user names (a prompt or corpus, a trace, a probe CSV, an
// adapter's config or tensors), read into memory with the same one-line
// errors everywhere: a missing file, a directory, a file over the caller's
// limit and a failed read are each an InputError naming the file.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace sparrow {

inline constexpr uint64_t kNoSizeLimit = std::numeric_limits<uint64_t>::max();

// `what` names the file in messages ("trace", "prompt file"). A regular
// file's size is checked before anything is read; a pipe or device (e.g.
// /dev/stdin) is read to its end, up to the same limit.
std::string ReadWholeFile(const std::string& path, std::string_view what,
                          uint64_t max_bytes = kNoSizeLimit);
std::vector<uint8_t> ReadWholeFileBytes(const std::string& path, std::string_view what,
                                        uint64_t max_bytes = kNoSizeLimit);

}  // namespace sparrow
