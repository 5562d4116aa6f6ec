#!/usr/bin/env bash
# The wheel runs anywhere (issue 35): build it, install it into a fresh venv and, from an empty
# folder with the checkout off the path, run a demo sweep, a sweep on another shipped dataset,
# a reference import and `alcheck references`. Nothing may be written into the install folder;
# everything lands under the empty folder.
#   bash bench/wheel_check.sh            (make wheel-check; CI runs it after the tests)
# The venv sees the system's packages (--system-site-packages: torch is not fetched again), so the
# check also proves that the alcheck it runs is the wheel's, not an editable install of the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PYTHON=${PYTHON:-python3}
start=$SECONDS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "wheel-check FAIL: $*" >&2; exit 1; }

# built from a copy of what the build reads (as an sdist holds it): no build/ left in the checkout
# whose stale files a later build would pack
mkdir "$work/src"
tar -c --exclude=__pycache__ --exclude='*.egg-info' --exclude=alcheck/data \
	pyproject.toml setup.py MANIFEST.in README.md alcheck datasets results/references | tar -x -C "$work/src"
rm -f dist/alcheck-*.whl
"$PYTHON" -m pip wheel "$work/src" --no-deps -w dist/ -q
wheel=$(ls dist/alcheck-*.whl)
echo "built $wheel ($(du -h "$wheel" | cut -f1)) in $((SECONDS - start)) s"

"$PYTHON" -m venv --system-site-packages "$work/venv"
vpy=$work/venv/bin/python
"$vpy" -m pip install -q --no-deps "$wheel"
site=$("$vpy" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
[ ! -e "$site/datasets/mt_bench" ] || fail "the wheel installed a top-level datasets/ package"

# the install's files before (bytecode aside: Python may cache it wherever it may write)
snapshot() { (cd "$work/venv" && find . -path '*/__pycache__' -prune -o -type f -printf '%p %s %T@\n' | sort); }
snapshot >"$work/before"

mkdir "$work/empty"
cd "$work/empty"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
unset PYTHONPATH
alcheck="$work/venv/bin/alcheck"
where=$("$vpy" -c "import alcheck, pathlib; print(pathlib.Path(alcheck.__file__).resolve())")
case "$where" in
"$(cd "$site" && pwd -P)"/alcheck/*) echo "alcheck from $where" ;;
*) fail "alcheck was imported from $where, not the venv's site-packages ($site)" ;;
esac

sweep="--ks 1 --limit 2 --max-tokens 16 --repeats 1"
# shellcheck disable=SC2086  # $sweep is a list of options
"$alcheck" run $sweep >"$work/demo.log" 2>&1 || { cat "$work/demo.log"; fail "the demo sweep"; }
ls results/runs/*/run.json >/dev/null 2>&1 || fail "the demo sweep wrote no run under the current folder"
# shellcheck disable=SC2086
"$alcheck" run $sweep --dataset gsm8k --out gsm8k-run >"$work/gsm8k.log" 2>&1 ||
	{ cat "$work/gsm8k.log"; fail "the gsm8k sweep"; }
"$vpy" - <<'EOF' || fail "the runs' records"
import json
for folder, dataset in (("gsm8k-run", "gsm8k"),):
    meta = json.load(open(f"{folder}/run.json"))
    assert meta["config"]["dataset"] == dataset and meta["status"] == "complete", meta["config"]
EOF

# an import lands under the current folder, and is listed beside the shipped tables
printf 'num_drafts: 1000\nnum_draft_tokens: 3000\nnum_accepted_tokens: 1296\n' >spec_decode.txt
"$alcheck" import vllm-spec-decode spec_decode.txt --name my-import \
	--target meta-llama/Llama-3.1-8B-Instruct --dataset mt_bench --temperature 0 >"$work/import.log" 2>&1 ||
	{ cat "$work/import.log"; fail "alcheck import"; }
[ -f results/references/my-import.json ] || fail "the import did not write ./results/references/my-import.json"
"$alcheck" references >"$work/references.txt" || fail "alcheck references"
grep -q "seed-vllm-v1-llama31-8b" "$work/references.txt" || fail "alcheck references lists no shipped table"
"$alcheck" references --json >"$work/references.json"
shipped=$(ls "$root"/results/references/*.json | wc -l)
"$vpy" -c "
import json, sys
names = [r['name'] for r in json.load(open('$work/references.json'))]
sys.exit(0 if len(names) == $shipped + 1 and 'my-import' in names else f'listed {names}')
" || fail "alcheck references --json: not the $shipped shipped tables and the import"

snapshot >"$work/after"
diff "$work/before" "$work/after" >/dev/null || {
	diff "$work/before" "$work/after" | head -20
	fail "files were written into the install folder"
}
echo "written under the empty folder: $(find . -type f | wc -l) files ($(ls -d results/runs/* gsm8k-run results/references | tr '\n' ' '))"

# pipx (issue 35: "pipx install works the same way"), when this machine has it: the same wheel as an
# app in its own venv (the system's packages seen, as above, and no index asked: the check stays
# offline), `alcheck references` from another empty folder. uv tool install has no way to see the
# system's torch, so it would fetch every dependency: not checked here (see cli-help-notes).
if command -v pipx >/dev/null; then
	export PIPX_HOME="$work/pipx" PIPX_BIN_DIR="$work/pipx-bin"
	PIP_NO_INDEX=1 pipx install --system-site-packages "$root/$wheel" >"$work/pipx.log" 2>&1 ||
		{ cat "$work/pipx.log"; fail "pipx install"; }
	mkdir "$work/empty-pipx"
	(cd "$work/empty-pipx" && "$PIPX_BIN_DIR/alcheck" references >"$work/references-pipx.txt") ||
		fail "alcheck references from the pipx install"
	grep -q "seed-vllm-v1-llama31-8b" "$work/references-pipx.txt" || fail "pipx: alcheck references lists no shipped table"
	echo "pipx install: alcheck references lists the shipped tables"
else
	echo "pipx not found: its install was not checked"
fi
echo "wheel-check PASS in $((SECONDS - start)) s"
