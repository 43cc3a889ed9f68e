#include "daemon/service/access_policy.h"

#include <grp.h>
#include <pwd.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/common/status_macros.h"

namespace statecache {

absl::StatusOr<AccessPolicy::List> AccessPolicy::ParseList(
    absl::string_view text, absl::string_view flag) {
  List list;
  list.configured = true;
  for (absl::string_view raw : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const absl::string_view item = absl::StripAsciiWhitespace(raw);
    if (item.empty()) continue;
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", item, "' ", why));
    };
    Entry entry;
    absl::string_view value;
    if (item == "any") {
      entry.kind = Entry::Kind::kAny;
    } else if (absl::ConsumePrefix(&(value = item), "uid:") ||
               absl::ConsumePrefix(&(value = item), "gid:")) {
      entry.kind = absl::StartsWith(item, "uid:") ? Entry::Kind::kUid
                                                  : Entry::Kind::kGid;
      if (!absl::SimpleAtoi(value, &entry.id)) {
        return bad("is not uid:N or gid:N with N a number");
      }
    } else if (absl::ConsumePrefix(&(value = item), "user:")) {
      const std::string name(value);
      const passwd* pw = ::getpwnam(name.c_str());
      if (pw == nullptr) return bad("names no user on this machine");
      entry.kind = Entry::Kind::kUid;
      entry.id = pw->pw_uid;
    } else if (absl::ConsumePrefix(&(value = item), "group:")) {
      const std::string name(value);
      const group* gr = ::getgrnam(name.c_str());
      if (gr == nullptr) return bad("names no group on this machine");
      entry.kind = Entry::Kind::kGid;
      entry.id = gr->gr_gid;
    } else if (absl::ConsumePrefix(&(value = item), "x509:") &&
               !value.empty()) {
      entry.kind = Entry::Kind::kCertificate;
      entry.name = std::string(value);
    } else {
      return bad(
          "is not one of uid:N, user:NAME, gid:N, group:NAME, x509:NAME, "
          "any");
    }
    list.entries.push_back(std::move(entry));
  }
  return list;
}

absl::StatusOr<AccessPolicy> AccessPolicy::Parse(
    absl::string_view attach_allow, absl::string_view admin_allow) {
  AccessPolicy policy;
  ASSIGN_OR_RETURN(policy.attach_, ParseList(attach_allow, "attach_allow"));
  ASSIGN_OR_RETURN(policy.admin_, ParseList(admin_allow, "admin_allow"));
  for (const Entry& entry : policy.admin_.entries) {
    if (entry.kind == Entry::Kind::kAny) {
      return absl::InvalidArgumentError(
          "--admin_allow: 'any' would let every client resize, drain and "
          "evict; name the operators' uids, groups or certificates");
    }
  }
  return policy;
}

bool AccessPolicy::List::Admits(const Peer& peer) const {
  if (!configured || peer.kind == Peer::Kind::kInProcess) return true;
  for (const Entry& entry : entries) {
    switch (entry.kind) {
      case Entry::Kind::kAny:
        return true;
      case Entry::Kind::kUid:
        if (peer.kind == Peer::Kind::kLocal && peer.uid == entry.id) {
          return true;
        }
        break;
      case Entry::Kind::kGid:
        if (peer.kind == Peer::Kind::kLocal && peer.gid == entry.id) {
          return true;
        }
        break;
      case Entry::Kind::kCertificate:
        if (peer.kind == Peer::Kind::kCertificate &&
            peer.certificate == entry.name) {
          return true;
        }
        break;
    }
  }
  return false;
}

std::string AccessPolicy::List::DebugString() const {
  if (!configured) return "any";
  if (entries.empty()) return "(nobody)";
  return absl::StrJoin(entries, ",", [](std::string* out, const Entry& e) {
    switch (e.kind) {
      case Entry::Kind::kAny:
        return absl::StrAppend(out, "any");
      case Entry::Kind::kUid:
        return absl::StrAppend(out, "uid:", e.id);
      case Entry::Kind::kGid:
        return absl::StrAppend(out, "gid:", e.id);
      case Entry::Kind::kCertificate:
        return absl::StrAppend(out, "x509:", e.name);
    }
  });
}

absl::Status AccessPolicy::CheckAttach(const Peer& peer) const {
  if (attach_.Admits(peer)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("peer ", peer.Describe(),
                   " may not attach: it is not in --attach_allow (",
                   attach_.DebugString(), ")"));
}

absl::Status AccessPolicy::CheckAdmin(const Peer& peer,
                                      absl::string_view call) const {
  if (admin_.Admits(peer)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(call, " is an operator call; peer ", peer.Describe(),
                   " is not in --admin_allow (", admin_.DebugString(), ")"));
}

std::string AccessPolicy::DebugString() const {
  return absl::StrCat("attach_allow=", attach_.DebugString(),
                      " admin_allow=", admin_.DebugString());
}

}  // namespace statecache
