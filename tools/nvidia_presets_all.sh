#!/usr/bin/env bash
# Regenerate NVIDIA's executed presets of every release (src/optbench/data/bridge/presets-<bridge>.json and
# tests/fixtures/nvidia/<bridge>/): each tag's own scripts/performance (0.6: plus scripts/common and the perf
# recipes it ships in the wheel) run by tools/nvidia_presets.py in that release's Bridge environment
# (make bridge-env). NeMo-Run's packager asks git for the top level, so each tag is unpacked into a scratch
# git work tree. Usage: tools/nvidia_presets_all.sh <Megatron-Bridge git dir> [release ...]  (default: all)
set -euo pipefail
mirror=${1:?usage: tools/nvidia_presets_all.sh <Megatron-Bridge git dir> [release ...]}
shift
wanted=" $* "
# A fixed place: NVIDIA's launcher writes the scripts' path into the rendered jobs kept as fixtures.
work=/tmp/nv
marker="$work/.optbench-nvidia-presets"
root=$(cd "$(dirname "$0")/.." && pwd)

extract() {  # release tag base-venv container
  local release=$1 tag=$2 venv=$3 container=$4 paths overlay commit
  [ "$wanted" = "  " ] || [[ "$wanted" == *" $release "* ]] || return 0
  if [ -e "$work" ]; then
    [ -f "$marker" ] || { echo "error: $work exists and is not this tool's; move it away" >&2; exit 2; }
    rm -rf "$work"
  fi
  mkdir "$work" && touch "$marker"
  paths="scripts/performance"
  [ "${release%.*}" = "0.6" ] && paths="scripts/performance scripts/common src/megatron/bridge/perf_recipes"
  # shellcheck disable=SC2086  # paths is a list
  git -C "$mirror" archive "$tag" $paths | tar -x -C "$work"
  git -C "$work" init -q && git -C "$work" add -A
  git -C "$work" -c user.email=optbench@localhost -c user.name=optbench commit -qm "$tag"
  commit=$(git -C "$mirror" rev-parse "$tag^{commit}")
  overlay=""
  [ "$release" != "0.3.1" ] && overlay="$root/.bridge-releases/$release"
  PYTHONPATH="$overlay" "$root/$venv/bin/python" "$root/tools/nvidia_presets.py" --scripts "$work/scripts/performance" \
    --release "$release" --commit "$commit" --image "nvcr.io/nvidia/$container"
}

extract 0.3.0 v0.3.0 .venv-bridge nemo:26.02
extract 0.3.1 v0.3.1 .venv-bridge nemo:26.02.01
extract 0.4.0 v0.4.0 .venv-bridge5 nemo:26.04
extract 0.4.2 v0.4.2 .venv-bridge5 nemo:26.04.01
extract 0.5.0 v0.5.0 .venv-bridge5 nemo:26.06
extract 0.5.1 v0.5.1 .venv-bridge5 nemo:26.06.01
extract 0.6.0 v0.6.0 .venv-bridge5 nemo:26.08
