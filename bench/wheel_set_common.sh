# Sourced by bench/make_*_wheels.sh (from the repo root): the Python that downloads, the
# git-ignoring of the folders a wheel set is built in (none of it belongs in git), and the cut
# into device-call parts (TOOLS and PART_MIB set by the caller).
PY=${PY:-.venv/bin/python}
# a git worktree has no venv of its own: use the main checkout's (beside the common .git)
[ -x "$PY" ] || PY="$(dirname "$(git rev-parse --path-format=absolute --git-common-dir)")/.venv/bin/python"
export PY

exclude_from_git() {  # PATH...: add each to .git/info/exclude once
  local exclude path
  exclude="$(git rev-parse --git-common-dir)/info/exclude"  # a worktree's .git is a file
  mkdir -p "$(dirname "$exclude")"
  for path in "$@"; do
    grep -qx "$path" "$exclude" 2>/dev/null || echo "$path" >> "$exclude"
  done
}

carry_split() {  # STAGE DEST: .whl/ joins the staged set, cut into parts of $PART_MIB under DEST
  local stage=$1 dest=$2
  mkdir -p "$stage/whl"
  cp .whl/*.whl "$stage/whl/"
  rm -rf "$dest"
  bash "$TOOLS/carry-parts" split "$stage" "$dest" --part-mib "$PART_MIB"
  mkdir -p "$dest/bin"
  cp "$TOOLS/carry-parts" "$dest/bin/"
  rm -rf "$stage"
}

show_parts() {  # DEST: each part's size
  du -b "$1"/p*/part-* | awk '{printf "%s %.1f MiB\n", $2, $1 / 1048576}'
}
