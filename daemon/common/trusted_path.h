// Checks on the files and directories the daemon trusts, as OpenSSH's
// StrictModes and systemd check theirs.
//
// The daemon writes its state directory and binds its socket by path, often
// as root. Anyone who can rename a directory on that path, or plant a file
// or symlink in it, can make the daemon write through a link, read an index
// they wrote, or have clients reach an impostor's socket. So before trusting
// a path the daemon checks every directory on it, from "/" down:
//
//   an ancestor   belongs to root or the daemon's user, and nobody else may
//                 write it unless it is sticky (then others may add entries
//                 but not rename or remove the daemon's: /tmp, /dev/shm);
//   a symlink     on the way belongs to root or the daemon's user (it sits
//                 in a checked directory), and its target is checked in turn;
//   its own dir   (CheckOwnDirectory) belongs to root or the daemon's user
//                 and nobody else may write it, sticky or not;
//   its files     (CheckOwnFile) are regular files, not symlinks, of root or
//                 the daemon's user, that nobody else may write.
//
// Once every directory on a path passes, nobody but root and the daemon's
// user can change what the path names, so opening by path is as safe as
// walking with openat; files are still opened O_NOFOLLOW and created O_EXCL.
//
// Every error names the path and what is wrong with it, in a sentence an
// operator can act on.
//
// Thread-safe: functions of their arguments and the filesystem.
#ifndef STATECACHE_DAEMON_COMMON_TRUSTED_PATH_H_
#define STATECACHE_DAEMON_COMMON_TRUSTED_PATH_H_

#include <sys/stat.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace statecache {

// Checks every directory on `path` (absolute, or relative to the working
// directory) as an ancestor, `path` itself included if it exists. Checking
// stops at the first component that does not exist: the daemon creates the
// rest itself, in a directory that passed. `what` names the path's role in
// messages (e.g. "--state_dir").
// Errors: PERMISSION_DENIED a directory or symlink another user owns, or
//   others may write without the sticky bit; FAILED_PRECONDITION a
//   component that is not a directory, or too many symlinks; INTERNAL a
//   system call failed.
absl::Status CheckAncestorsTrusted(std::string_view what,
                                   const std::string& path);

// The rule for a directory the daemon keeps its own files in. `st` is the
// directory's fstat.
// Errors: PERMISSION_DENIED another user's, or writable by others.
absl::Status CheckOwnDirectory(std::string_view what, const std::string& path,
                               const struct stat& st);

// The rule for a file the daemon reads or replaces. `st` is its lstat (or
// fstat of a descriptor opened O_NOFOLLOW).
// Errors: PERMISSION_DENIED a symlink, not a regular file, another user's,
//   or writable by others.
absl::Status CheckOwnFile(std::string_view what, const std::string& path,
                          const struct stat& st);

}  // namespace statecache

#endif  // STATECACHE_DAEMON_COMMON_TRUSTED_PATH_H_
