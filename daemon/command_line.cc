#include "daemon/command_line.h"

#include "absl/algorithm/container.h"
#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace statecache {

// What is wrong with the command line's flags, or nullopt: a flag this
// program does not define, or a value its flag cannot parse. Reads the
// command line as absl::ParseCommandLine does ("--name=value", "--name
// value", "--noname" for a bool, one or two dashes, "--" ending the flags),
// and knows Abseil's own flags (--help and its kin are not registered).
std::optional<std::string> BadFlag(int argc, char** argv) {
  static constexpr absl::string_view kUsageFlags[] = {
      "help",   "helpfull",  "helpshort",       "helppackage",
      "helpon", "helpmatch", "only_check_args", "version"};
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // positional
    absl::string_view name = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = name.find('=');
    const bool has_value = eq != absl::string_view::npos;
    const absl::string_view value = has_value ? name.substr(eq + 1) : "";
    name = name.substr(0, eq);
    if (absl::c_linear_search(kUsageFlags, name)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      const absl::CommandLineFlag* negated =
          absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;
    }
    if (flag == nullptr) {
      return absl::StrCat("unknown flag --", name,
                          " (statecached --help lists them)");
    }
    absl::string_view given = value;
    if (!has_value) {
      if (flag->IsOfType<bool>()) continue;
      if (i + 1 >= argc) return absl::StrCat("--", name, " needs a value");
      given = argv[++i];  // "--name value": whatever the value starts with
    }
    // Parsed again by ParseCommandLine; parsing it here only judges it.
    std::string error;
    if (!flag->ParseFrom(given, &error)) {
      return absl::StrCat("--", name, "=", given, ": ", error);
    }
  }
  return std::nullopt;
}

}  // namespace statecache
