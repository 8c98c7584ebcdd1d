# Sourced by bench/make_*_wheels.sh (from the repo root): the Python that downloads, and the
# git-ignoring of the folders a wheel set is built in (none of it belongs in git).
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
