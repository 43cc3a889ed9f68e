// Debian's Abseil 20220623 is built with its own absl::string_view (not an
// alias of std::string_view), so StrCat, StrJoin, StrSplit and friends do not
// accept a std::string_view. This project's interfaces use std::string_view;
// these two conversions bridge at the call sites.
#ifndef STATECACHE_DAEMON_COMMON_STRING_VIEW_COMPAT_H_
#define STATECACHE_DAEMON_COMMON_STRING_VIEW_COMPAT_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace statecache {

inline absl::string_view Av(std::string_view s) { return {s.data(), s.size()}; }
inline std::string_view Sv(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace statecache

#endif  // STATECACHE_DAEMON_COMMON_STRING_VIEW_COMPAT_H_
