// Small status helpers: Abseil 20220623 ships absl::Status but not the
// RETURN_IF_ERROR / ASSIGN_OR_RETURN macros, so the project defines its own.
#ifndef STATECACHE_DAEMON_COMMON_STATUS_MACROS_H_
#define STATECACHE_DAEMON_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define STATECACHE_CONCAT_INNER_(a, b) a##b
#define STATECACHE_CONCAT_(a, b) STATECACHE_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status _sc_status = (expr);      \
    if (!_sc_status.ok()) return _sc_status; \
  } while (0)

// `lhs = value of expr` if expr (an absl::StatusOr<T>) is OK, else returns
// its status from the enclosing function.
#define ASSIGN_OR_RETURN(lhs, expr)                              \
  auto STATECACHE_CONCAT_(_sc_statusor_, __LINE__) = (expr);     \
  if (!STATECACHE_CONCAT_(_sc_statusor_, __LINE__).ok())         \
    return STATECACHE_CONCAT_(_sc_statusor_, __LINE__).status(); \
  lhs = std::move(STATECACHE_CONCAT_(_sc_statusor_, __LINE__)).value()

#endif  // STATECACHE_DAEMON_COMMON_STATUS_MACROS_H_
