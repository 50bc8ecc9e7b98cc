// Generated text as a user sees it: pieces of tokens come in, text safe to
// show goes out. Two things are held back until the next piece decides them:
// bytes that may be the start of a stop string (so a stop string is never
// shown, even split over several tokens), and the first bytes of a UTF-8
// character whose remaining bytes have not come yet (so streamed text is
// always whole characters, as JSON and terminals need).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sparrow {

class TextStream {
 public:
  // Empty stop strings are ignored.
  explicit TextStream(std::vector<std::string> stops = {});

  // Adds a piece and returns the text that can now be shown. Once a stop
  // string appears, the text before it is returned, the rest is dropped, and
  // stopped() holds (later calls return "").
  std::string Add(std::string_view piece);
  // The end of generation: returns what was held back (an incomplete UTF-8
  // character included, as it is).
  std::string Finish();

  bool stopped() const { return stopped_; }
  // Everything returned so far.
  const std::string& text() const { return shown_; }

 private:
  std::string Emit(size_t n);

  std::vector<std::string> stops_;
  std::string pending_;
  std::string shown_;
  bool stopped_ = false;
};

// The length of the longest prefix of `text` that ends on a whole UTF-8
// character (at most 3 trailing bytes of an unfinished one are excluded).
size_t CompleteUtf8Prefix(std::string_view text);

}  // namespace sparrow
