#!/usr/bin/env bash
# Builds the transformer-engine 2.19.0 set for the lent H200 (python 3.12, torch 2.11 + CUDA 13
# there, no network) and cuts it into parts that each fit one device call (issue 19 part 4).
#
# The sequence (device tool; one part per call, back to back while the machine stays warm):
#   here:      bash bench/make_te_wheels.sh            # prints the part count (5 for 2.19.0)
#   call k:    run(command="bash bench/gpu_device_run.sh te-carry",
#                  carry=[".carry-te/bin", ".carry-te/pNN"])   # pNN = p00, p01, ... one per call
#   last call: run(command="bash bench/gpu_device_run.sh te-carry te-build te-bench",
#                  carry=[".carry-te/bin", ".carry-te/<last pNN>"])
#              te-build compiles transformer-engine-torch there (about 2-6 min, bounded by
#              `timeout 560`) and brings the built wheel back in $OUT/te-wheel/; te-bench needs a
#              second call when the build took most of the first: run(command=
#              "bash bench/gpu_device_run.sh te-build te-bench") (te-build is then a no-op).
#   Keep the built wheel: copy files_at/te-wheel/*.whl into .te-wheel/ here (a wheel over 15 MiB
#   comes back cut: `cat NAME.whl.part00 NAME.whl.part01 ... > .te-wheel/NAME.whl`, sha256 in
#   te_build.log). Later sessions then skip the build: the 5 te-carry calls as above, and
#   run(command="bash bench/gpu_device_run.sh te-build te-bench", carry=[".te-wheel"]).
#   If the build fails in csrc/extensions/ep.cpp (NCCL EP), try NVTE_WITH_NCCL_EP=0 in front.
#
# What goes where (nothing of it in git: the folders are added to .git/info/exclude):
#   .te-wheels/core          transformer_engine_cu13 (the core library: libtransformer_engine.so
#                            and the whole Python package) and transformer_engine (the meta
#                            package: the same Python files plus the dist-info that TE's import
#                            asserts: `version("transformer-engine")` must equal the core's)
#   .te-wheels/src           transformer_engine_torch sdist (source only; compiled on the device)
#   .te-wheels/deps/build    wheel (TE's setup.py imports wheel.bdist_wheel) and ninja (parallel
#                            compile; without it torch's cpp_extension compiles file by file)
#   .te-wheels/deps/runtime  pydantic (+ core, annotated-types, typing-inspection), einops,
#                            packaging, typing-extensions: imported by transformer_engine.pytorch;
#                            the device installs only those its image lacks
#   .carry-te/pNN            the parts (also holding .whl/: Ray, megatron-core ..., so a fresh
#                            machine needs nothing else); .carry-te/bin/carry-parts joins them
#   .te-wheel/               the torch binding built on the H200, once brought back (see above)
#
# Why not smaller: libtransformer_engine.so is 305 MB (240 MB deflated), of which 233 MB are
# cubins for sm_75/80/89/90/100/103/107/120 (no PTX); sm_90 (H200) is 15 MB of it. Cutting the
# other architectures out means rewriting the .nv_fatbin section of a shared library, which no
# tool here does safely, so the wheel travels whole. xz -6 of the .so gives 220.9 MiB against
# the wheel's 229.7 MiB deflate: 9 MiB, not one part less.
#
# The sdist: `pip download` of an sdist prepares its metadata, and TE's setup.py needs a CUDA
# torch for that (torch.version.cuda), so it fails here; the file is fetched from PyPI's simple
# index (the JSON form pip reads) and checked against the index's sha256.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/wheel_set_common.sh
TOOLS=${TE_TOOLS:-../shared/tools}
PART_MIB=${PART_MIB:-58}
TE_VERSION=${TE_VERSION:-2.19.0}
exclude_from_git /.te-wheels/ /.te-wheel/ /.carry-te/ /.whl/
ls .whl/megatron_core-*.whl >/dev/null 2>&1 || bash bench/make_gpu_wheels.sh
fetch() {  # binary cp312 manylinux wheels for the device, no dependencies
  local dest=$1
  shift
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$dest" "$@"
}
rm -rf .te-wheels
mkdir -p .te-wheels/core .te-wheels/src .te-wheels/deps/build .te-wheels/deps/runtime
fetch .te-wheels/core "transformer-engine-cu13==$TE_VERSION" "transformer-engine==$TE_VERSION"
fetch .te-wheels/deps/build wheel==0.48.0 ninja==1.13.2
fetch .te-wheels/deps/runtime pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 einops==0.8.2 packaging==26.4 typing-extensions==4.16.0
"$PY" - "$TE_VERSION" .te-wheels <<'PY'
"""Fetch the transformer_engine_torch sdist (sha256 checked), then check that the three TE
packages share one version and that the sdist asks for exactly this core package."""
import hashlib, json, pathlib, re, sys, tarfile, urllib.request, zipfile

version, root = sys.argv[1], pathlib.Path(sys.argv[2])
name = f"transformer_engine_torch-{version}.tar.gz"
req = urllib.request.Request("https://pypi.org/simple/transformer-engine-torch/",
                             headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = {f["filename"]: f for f in json.load(urllib.request.urlopen(req, timeout=60))["files"]}
if name not in files:
    sys.exit(f"{name} is not on PyPI's index")
data = urllib.request.urlopen(files[name]["url"], timeout=120).read()
if hashlib.sha256(data).hexdigest() != files[name]["hashes"]["sha256"]:
    sys.exit(f"{name}: sha256 differs from the index's")
(root / "src" / name).write_bytes(data)


def wheel_version(pattern: str) -> str:
    [path] = (root / "core").glob(pattern)
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return re.search(r"^Version: (\S+)", z.read(meta).decode(), re.M).group(1)


with tarfile.open(root / "src" / name) as tar:
    pkg_info = tar.extractfile(f"transformer_engine_torch-{version}/PKG-INFO").read().decode()
    requires = tar.extractfile(f"transformer_engine_torch-{version}/"
                               "transformer_engine_torch.egg-info/requires.txt").read().decode()
found = {"transformer-engine-cu13": wheel_version("transformer_engine_cu13-*.whl"),
         "transformer-engine": wheel_version("transformer_engine-*.whl"),
         "transformer-engine-torch": re.search(r"^Version: (\S+)", pkg_info, re.M).group(1)}
print("versions:", found)
if set(found.values()) != {version}:
    sys.exit(f"the TE packages do not share version {version}: {found}")
if f"transformer_engine_cu13=={version}" not in requires.split():
    sys.exit(f"the sdist does not require transformer_engine_cu13=={version}:\n{requires}")
PY
# one tree for carry-parts: the TE set under te/, Ray & co. (.whl) under whl/
stage=$(mktemp -d)
mkdir -p "$stage/te"
cp -r .te-wheels/core .te-wheels/src .te-wheels/deps "$stage/te/"
carry_split "$stage" .carry-te
du -sh .te-wheels/core .te-wheels/src .te-wheels/deps .whl
show_parts .carry-te
echo "parts: $(ls -d .carry-te/p*/ | wc -l) (one device call each; see the sequence above)"
