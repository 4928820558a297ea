# shellcheck shell=bash
# debian_mirror: the Debian archive this host's apt already uses, for building the labs' root filesystems;
# sourced, never run. The repository names no archive host: a machine's mirror is its own configuration.
# First what apt itself parsed (apt-get indextargets, after an `apt-get update`), then the sources files
# (deb822 .sources or one-line .list) for the host's own suite. Prints nothing when there is none.
debian_mirror() {
  local uri codename
  uri=$(apt-get indextargets --format '$(REPO_URI)' 'Identifier: Packages' 2>/dev/null \
    | grep -m1 -E '/debian/?$' | sed 's:/$::' || true)
  if [ -n "$uri" ]; then echo "$uri"; return 0; fi
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  apt_archive_for "$codename"
}

# apt_archive_for SUITE: the first archive the sources files (deb822 .sources or one-line .list) name for
# SUITE (e.g. bookworm, bookworm-security); prints nothing when none does.
apt_archive_for() {
  local suite=$1 f
  {
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -e "$f" ] || continue
      awk -v c="$suite" '
        function flush() { if (uri != "" && (" " suites " ") ~ (" " c " ")) { print uri; found = 1; exit } uri = ""; suites = "" }
        /^[[:space:]]*$/ { flush(); next }
        tolower($1) == "uris:" { uri = $2 }
        tolower($1) == "suites:" { $1 = ""; suites = $0 }
        END { if (!found) flush() }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [ -e "$f" ] || continue
      sed -E 's/\[[^]]*\]//' "$f" | awk -v c="$suite" '$1 == "deb" && $3 == c { print $2; exit }'
    done
  } | head -1 | sed 's:/$::'
}
