#include "src/chat/text_stream.h"

#include <algorithm>

namespace sparrow {

size_t CompleteUtf8Prefix(std::string_view text) {
  // Look back at most 3 bytes for the lead byte of the last character.
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) {
      need = 2;
    } else if ((c & 0xF0) == 0xE0) {
      need = 3;
    } else if ((c & 0xF8) == 0xF0) {
      need = 4;
    }
    return back < need ? n - back : n;
  }
  return n;  // plain bytes, or stray continuation bytes: nothing to wait for
}

TextStream::TextStream(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string TextStream::Emit(size_t n) {
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  shown_ += out;
  return out;
}

std::string TextStream::Add(std::string_view piece) {
  if (stopped_) return std::string();
  pending_ += piece;
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, pending_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = Emit(first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (size_t k = std::min(stop.size() - 1, pending_.size()); k > hold; --k) {
      if (std::string_view(pending_).substr(pending_.size() - k) ==
          std::string_view(stop).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  const size_t ready = CompleteUtf8Prefix(std::string_view(pending_).substr(0, pending_.size() - hold));
  return Emit(ready);
}

std::string TextStream::Finish() {
  if (stopped_) return std::string();
  return Emit(pending_.size());
}

}  // namespace sparrow
