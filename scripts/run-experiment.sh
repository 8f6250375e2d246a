#!/usr/bin/env bash
# Runs an experiment spec: every variant x repetition in its own guest, fio JSON and logs
# back over the results channel, then a comparison table and plots (scripts/exp-report.sh).
#
#   scripts/run-experiment.sh SPEC [OPTIONS]        (./hvstor run SPEC [OPTIONS])
#
#   --reps N          repetitions (overrides the spec's)
#   --runtime S       set every runtime= of the fio job to S seconds (quick tries)
#   --variants A,B    run only these variants (the first one given is the baseline)
#   --out DIR         results folder (default $HVSTOR_CACHE/results/<name>-<date>-<time>;
#                     $HVSTOR_CACHE/results/<name>-latest points at the last one)
#   --dry-run         print each variant's boot command and the guest script; boot nothing
#
# QEMU=PATH uses that qemu-system-x86_64 instead of building one (scripts/build-qemu.sh).
# The spec format is in docs/experiments.md. Order of runs: repetition-major (A B A B ...),
# so a slow drift of the host does not land on one variant. Each run is checked: the guest
# must report the module the variant asked for (stock, or the version scripts/build-module.sh
# stamped), the module parameters it asked for, and fio must exit 0; otherwise the
# experiment stops with the reason and the tail of that guest's console.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"


SPEC='' OPT_REPS='' OPT_RUNTIME='' OPT_VARIANTS='' OUT='' DRY=0
while [ $# -gt 0 ]; do
  case $1 in
    --reps) [ $# -ge 2 ] || die "--reps needs a value"; OPT_REPS=$2; shift 2 ;;
    --runtime) [ $# -ge 2 ] || die "--runtime needs a value"; OPT_RUNTIME=$2; shift 2 ;;
    --variants) [ $# -ge 2 ] || die "--variants needs a value"; OPT_VARIANTS=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; OUT=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$SPEC" ] || die "one spec at a time (got '$SPEC' and '$1')"; SPEC=$1; shift ;;
  esac
done
[ -n "$SPEC" ] || usage
[ -f "$SPEC" ] || die "no such spec file: $SPEC"
[ -z "$OPT_REPS" ] || [[ $OPT_REPS =~ ^[1-9][0-9]*$ ]] || die "--reps wants a positive number"
[ -z "$OPT_RUNTIME" ] || [[ $OPT_RUNTIME =~ ^[1-9][0-9]*$ ]] || die "--runtime wants seconds"
SPEC=$(realpath "$SPEC")
SPEC_DIR=$(dirname "$SPEC")

# --- tools -------------------------------------------------------------------------------
ensure_tools() {
  local p miss=()
  for p in jq gnuplot-nox; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || miss+=("$p")
  done
  [ ${#miss[@]} -gt 0 ] || return 0
  need_root
  export DEBIAN_FRONTEND=noninteractive
  mkdir -p "$HVSTOR_CACHE"
  if ! apt-get install -y --no-install-recommends "${miss[@]}" >"$HVSTOR_CACHE/apt-exp.log" 2>&1; then
    run_logged "apt-get update" "$HVSTOR_CACHE/apt-update.log" apt-get update
    run_logged "installing ${miss[*]}" "$HVSTOR_CACHE/apt-exp.log" \
      apt-get install -y --no-install-recommends "${miss[@]}"
  fi
}

# --- spec parsing ------------------------------------------------------------------------
# S["section|key"] = value; sections: experiment, disk.<n>, variant.<name>.
declare -A S=()
VARIANTS=() DISK_IDS=()
EXP_KEYS=" description kernel vcpus mem repetitions time-scale timeout log-avg-msec fio vm-perf
  storvsc patch params append tunables perf baseline "
VARIANT_KEYS=" description kernel vcpus mem patch params append tunables perf vm-perf
  published published-ratio "
# One blank between names, whatever the line breaks above.
EXP_KEYS=" $(echo $EXP_KEYS) " VARIANT_KEYS=" $(echo $VARIANT_KEYS) "

spec_error() { die "$SPEC:$1: $2"; }

parse_spec() {
  local line n=0 section='' key val tag='' hkey='' hval='' hline=0 trimmed
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    line=${line%$'\r'}
    if [ -n "$tag" ]; then
      if [ "$line" = "$tag" ]; then
        S["$section|$hkey"]=$hval; tag=''
      else
        hval+="$line"$'\n'
      fi
      continue
    fi
    trimmed=$(sed -E 's/^[[:space:]]+//; s/[[:space:]]+$//' <<<"$line")
    case $trimmed in ''|'#'*|';'*) continue ;; esac
    if [[ $trimmed =~ ^\[([a-z]+)([[:space:]]+([A-Za-z0-9_.-]+))?\]$ ]]; then
      local kind=${BASH_REMATCH[1]} name=${BASH_REMATCH[3]}
      case $kind in
        experiment) [ -z "$name" ] || spec_error "$n" "[experiment] takes no name"; section=experiment ;;
        disk) section=disk.${#DISK_IDS[@]}; DISK_IDS+=("${name:-${#DISK_IDS[@]}}") ;;
        variant)
          [ -n "$name" ] || spec_error "$n" "a variant needs a name: [variant NAME]"
          [ -z "${S["variant.$name|.exists"]:-}" ] || spec_error "$n" "variant '$name' defined twice"
          section=variant.$name; VARIANTS+=("$name"); S["$section|.exists"]=1 ;;
        *) spec_error "$n" "unknown section [$kind] (experiment, disk, variant NAME)" ;;
      esac
      continue
    fi
    [ -n "$section" ] || spec_error "$n" "'$trimmed' before any [section]"
    [[ $trimmed =~ ^([A-Za-z0-9_.-]+)[[:space:]]*=[[:space:]]*(.*)$ ]] ||
      spec_error "$n" "expected 'key = value', got '$trimmed'"
    key=${BASH_REMATCH[1]} val=${BASH_REMATCH[2]}
    # A comment after a value needs a blank before the '#'.
    val=$(sed -E 's/[[:space:]]+#.*$//' <<<"$val")
    case $section in
      experiment) [[ $EXP_KEYS == *" $key "* ]] || spec_error "$n" "unknown key '$key' in [experiment] (known:${EXP_KEYS% })" ;;
      variant.*) [[ $VARIANT_KEYS == *" $key "* ]] || spec_error "$n" "unknown key '$key' in a variant (known:${VARIANT_KEYS% })" ;;
    esac
    [ -z "${S["$section|$key"]+x}" ] || spec_error "$n" "'$key' given twice in this section"
    if [[ $val =~ ^\<\<([A-Za-z_][A-Za-z0-9_]*)$ ]]; then
      tag=${BASH_REMATCH[1]} hkey=$key hval='' hline=$n
      continue
    fi
    S["$section|$key"]=$val
  done < "$SPEC"
  [ -z "$tag" ] || spec_error "$hline" "'$hkey = <<$tag' is never closed by a line '$tag'"
  [ ${#VARIANTS[@]} -gt 0 ] || die "$SPEC: no [variant NAME] section"
  [ -n "${S["experiment|fio"]:-}" ] || die "$SPEC: [experiment] needs the fio job: fio = <<END ... END"
  [ ${#DISK_IDS[@]} -gt 0 ] || die "$SPEC: no [disk] section"
}

# exp KEY [DEFAULT]: the experiment's value.  var V KEY [DEFAULT]: the variant's, else the
# experiment's, else DEFAULT.
exp() { printf '%s' "${S["experiment|$1"]-${2-}}"; }
var() {
  if [ -n "${S["variant.$1|$2"]+x}" ]; then printf '%s' "${S["variant.$1|$2"]}"
  else printf '%s' "${S["experiment|$2"]-${3-}}"; fi
}

parse_spec
EXP_NAME=$(basename "$SPEC"); EXP_NAME=${EXP_NAME%.exp}
if [ -n "$OPT_VARIANTS" ]; then
  IFS=, read -r -a sel <<<"$OPT_VARIANTS"
  for v in "${sel[@]}"; do
    [ -n "${S["variant.$v|.exists"]:-}" ] || die "--variants: no variant '$v' in $SPEC (has: ${VARIANTS[*]})"
  done
  VARIANTS=("${sel[@]}")
fi
BASELINE=$(exp baseline "${VARIANTS[0]}")
[ -n "${S["variant.$BASELINE|.exists"]:-}" ] || die "$SPEC: baseline '$BASELINE' is not a variant"
# The baseline goes first in tables.
ordered=("$BASELINE")
for v in "${VARIANTS[@]}"; do [ "$v" = "$BASELINE" ] || ordered+=("$v"); done
VARIANTS=("${ordered[@]}")

REPS=${OPT_REPS:-$(exp repetitions 3)}
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "$SPEC: repetitions must be a positive number"
SCALE=$(exp time-scale 1)
if ! [[ $SCALE =~ ^[0-9]+(\.[0-9]+)?$ ]] || ! awk -v s="$SCALE" 'BEGIN { exit !(s > 0) }'; then
  die "$SPEC: time-scale must be a positive number"
fi
LOG_AVG=$(exp log-avg-msec 1000)
[[ $LOG_AVG =~ ^[1-9][0-9]*$ ]] || die "$SPEC: log-avg-msec must be a positive number"

# --- the fio job -------------------------------------------------------------------------
# Adds what the harness needs to [global] (created when missing): per-job IOPS and latency
# logs averaged over log-avg-msec, and filename=${DISK} when the job names no file. The
# spec's own [global] lines come after ours, so they win.
JOB=${S["experiment|fio"]}
if [ -n "$OPT_RUNTIME" ]; then
  JOB=$(sed -E "s/^([[:space:]]*runtime[[:space:]]*=[[:space:]]*).*/\\1$OPT_RUNTIME/" <<<"$JOB")
fi
inject="write_iops_log\nwrite_lat_log\nlog_avg_msec=$LOG_AVG"
grep -qE '^[[:space:]]*filename[[:space:]]*=' <<<"$JOB" || inject="$inject\nfilename=\${DISK}"
if grep -qE '^[[:space:]]*\[global\]' <<<"$JOB"; then
  JOB=$(awk -v add="$inject" '{ print } !done && /^[[:space:]]*\[global\]/ { gsub(/\\n/, "\n", add); print add; done = 1 }' <<<"$JOB")
else
  JOB=$(printf '[global]\n%b\n%s\n' "$inject" "$JOB")
fi
grep -E '^[[:space:]]*\[' <<<"$JOB" | grep -qvE '\[global\]' || die "$SPEC: the fio job has no [job] section"
# Seconds of fio per boot: runtimes (or 60 s for a job without one) of every section.
FIO_SECS=$(awk -F= '
  /^[[:space:]]*\[/ { sections++ }
  /^[[:space:]]*runtime[[:space:]]*=/ { v = $2; gsub(/[[:space:]]/, "", v); m = 1
    if (v ~ /m$/) { m = 60; sub(/m$/, "", v) } else if (v ~ /s$/) sub(/s$/, "", v)
    total += v * m; n++ }
  END { if (n == 0) total = 60; print int(total) }' <<<"$JOB")

# --- variants: resolve everything before the first boot ------------------------------------
PERF_USED=0 VMPERF_USED=0
declare -A V_KERNEL=() V_VCPUS=() V_MEM=() V_KO=() V_VERSION=() V_APPEND=() V_PARAMS=()
declare -A V_TUNE=() V_DEVS=() V_SUMMARY=() V_TIMEOUT=()

# A path in the spec is relative to the spec's folder, then to the current one; anything
# else (a name in guest-patches/, none) goes to build-module.sh as it is.
resolve_patch() {
  local p=$1
  if [ -f "$SPEC_DIR/$p" ]; then realpath "$SPEC_DIR/$p"
  elif [ -f "$p" ]; then realpath "$p"
  else printf '%s' "$p"; fi
}

# QEMU's option syntax: a comma inside a property value is written twice.
qemu_escape() { printf '%s' "${1//,/,,}"; }

# Appends time-scale=SCALE to a perf string that does not set it.
with_scale() {
  local p=$1
  if [ "$SCALE" != 1 ] && ! grep -qE '(^|,)time-scale=' <<<"$p"; then p="$p,time-scale=$SCALE"; fi
  printf '%s' "$p"
}

# A perf string that sets another scale would make the scaled-back results wrong.
check_scale() {
  local p=$1 own
  own=$(grep -oE '(^|,)time-scale=[^,]*' <<<"$p" | sed 's/.*=//' | head -n 1 || true)
  [ -n "$own" ] || return 0
  awk -v a="$own" -v b="$SCALE" 'BEGIN { exit !(a == b) }' ||
    die "$SPEC: '$p' sets time-scale=$own, the experiment's time-scale is $SCALE: set it once, in [experiment]"
}

# Device arguments of a variant, one per line (-device, VALUE, ...).
variant_devices() {
  local v=$1 i key vmperf perf props sc scaled
  vmperf=$(var "$v" vm-perf)
  if [ -n "$vmperf" ]; then
    scaled=$(with_scale "$vmperf")
    printf '%s\n' -device "hv-vmbus-bridge,vm-perf=$(qemu_escape "$scaled")"
  fi
  sc=$(exp storvsc)
  printf '%s\n' -device "hv-storvsc,id=scsi0${sc:+,$sc}"
  for i in "${!DISK_IDS[@]}"; do
    props="id=disk$i,bus=scsi0.0,lun=$i"
    perf=$(var "$v" perf)
    for key in $(printf '%s\n' "${!S[@]}" | sed -n "s/^disk\\.$i|//p" | sort); do
      case $key in
        lun|bus|id) die "$SPEC: [disk] sets '$key'; the runner assigns it (LUNs count from 0, ids are disk0, disk1, ...)" ;;
        perf) [ -n "$perf" ] || perf=${S["disk.$i|perf"]} ;;
        file)
          local f=${S["disk.$i|file"]}
          if [ "$f" = scratch ]; then f=$OUT/disk$i.img
          elif [ -f "$SPEC_DIR/$f" ]; then f=$(realpath "$SPEC_DIR/$f"); fi
          props+=",file=$f" ;;
        size) [ "${S["disk.$i|file"]:-}" = scratch ] || props+=",size=${S["disk.$i|size"]}" ;;
        *) props+=",$key=$(qemu_escape "${S["disk.$i|$key"]}")" ;;
      esac
    done
    if [ -n "$perf" ]; then
      scaled=$(with_scale "$perf")
      props+=",perf=$(qemu_escape "$scaled")"
    fi
    printf '%s\n' -device "hv-disk,$props"
  done
}

prepare_variants() {
  local v kernel patch ko info params p app tun vcpus mem devs summary i
  for v in "${VARIANTS[@]}"; do
    kernel=$(var "$v" kernel debian-6.1)
    vcpus=$(var "$v" vcpus 2); mem=$(var "$v" mem 1G)
    [[ $vcpus =~ ^[1-9][0-9]*$ ]] || die "$SPEC: variant $v: vcpus must be a positive number"
    V_KERNEL[$v]=$kernel; V_VCPUS[$v]=$vcpus; V_MEM[$v]=$mem
    summary=$(var "$v" description)
    summary="${summary:+$summary: }$kernel"
    patch=$(var "$v" patch)
    V_KO[$v]='' V_VERSION[$v]=''
    if [ -n "$patch" ]; then
      patch=$(resolve_patch "$patch")
      if [ "$DRY" = 1 ]; then
        ko="(scripts/build-module.sh --kernel $kernel $patch)"
      else
        log "variant $v: building hv_storvsc with patch $patch"
        ko=$(bash "$HVSTOR_ROOT/scripts/build-module.sh" --kernel "$kernel" "$patch" | tail -n 1) ||
          die "variant $v: building the module failed"
        info=$(dirname "$ko")/build-info
        V_VERSION[$v]=$(sed -n 's/^version=//p' "$info")
        [ -n "${V_VERSION[$v]}" ] || die "variant $v: $info has no version"
      fi
      V_KO[$v]=$ko
      summary+=", hv_storvsc built with $(basename "$patch")"
    else
      summary+=", stock hv_storvsc"
    fi
    params=$(var "$v" params)
    app=''
    for p in $params; do
      [[ $p == *=* ]] || die "$SPEC: variant $v: params wants name=value items, got '$p'"
      case ${p%%=*} in
        *.*) app+=" $p" ;;
        *) app+=" hv_storvsc.$p" ;;
      esac
    done
    V_PARAMS[$v]=$params
    [ -z "$params" ] || summary+=", $params"
    app+=" $(var "$v" append)"
    V_APPEND[$v]=$(sed -E 's/^ +//; s/ +$//' <<<"$app")
    tun=$(var "$v" tunables)
    for p in $tun; do [[ $p == *=* ]] || die "$SPEC: variant $v: tunables wants key=value items, got '$p'"; done
    V_TUNE[$v]=$tun
    [ -z "$tun" ] || summary+=", $tun"
    p=$(var "$v" vm-perf)
    [ -z "$p" ] || { VMPERF_USED=1; check_scale "$p"; }
    p=$(var "$v" perf)
    [ -z "$p" ] || { PERF_USED=1; check_scale "$p"; }
    for i in "${!DISK_IDS[@]}"; do
      p=${S["disk.$i|perf"]:-}
      [ -z "$p" ] || { PERF_USED=1; check_scale "$p"; }
    done
    devs=$(variant_devices "$v") || exit 1
    V_DEVS[$v]=$devs
    V_SUMMARY[$v]=$summary
    V_TIMEOUT[$v]=$(exp timeout $((150 + 2 * FIO_SECS)))
  done
}

# --- the guest side ------------------------------------------------------------------------
# The command the guest runs (busybox sh). $1: variant.
guest_script() {
  local v=$1 ndisks=${#DISK_IDS[@]}
  cat <<EOF
R=\${HVSTOR_RESULTS:-}
fail() { echo "hvstor-exp: \$*"; [ -z "\$R" ] || echo "\$*" > "\$R/error"; exit 3; }
[ -n "\$R" ] || fail "no results channel (boot.sh --results)"
command -v fio >/dev/null || fail "fio is missing from the guest initramfs"
dev_of_lun() {
  for d in /sys/block/sd*; do
    [ -e "\$d/device" ] || continue
    a=\$(basename "\$(readlink "\$d/device")")
    [ "\${a##*:}" = "\$1" ] && echo "\$(basename "\$d")"
  done
}
lun=0
while [ \$lun -lt $ndisks ]; do
  d=\$(dev_of_lun \$lun)
  [ -n "\$d" ] || fail "no disk at LUN \$lun (hv_storvsc not loaded or no disk found: see the console)"
  eval "DISK\$lun=/dev/\$d"; export DISK\$lun
  DISKS="\${DISKS:-} \$d"
  lun=\$((lun + 1))
done
DISK=\$DISK0; export DISK
for d in \$DISKS; do
  hvstor-blk-tune \$d ${V_TUNE[$v]} >> "\$R/tunables" 2>&1 || { cat "\$R/tunables"; fail "block tunables refused"; }
done
{
  echo "kernel=\$(uname -r)"
  echo "cmdline=\$(cat /proc/cmdline)"
  echo "cpus=\$(nproc)"
  m=/sys/module/hv_storvsc
  echo "module.loaded=\$([ -d \$m ] && echo yes || echo no)"
  echo "module.version=\$(cat \$m/version 2>/dev/null)"
  echo "module.srcversion=\$(cat \$m/srcversion 2>/dev/null)"
  echo "module.taint=\$(cat \$m/taint 2>/dev/null)"
  for p in \$m/parameters/*; do echo "param.\$(basename \$p)=\$(cat \$p)"; done
  echo "vmbus.channels=\$(ls -d /sys/bus/vmbus/devices/*/channels/*/ 2>/dev/null | wc -l)"
  for h in /sys/class/scsi_host/host*; do
    [ "\$(cat \$h/proc_name 2>/dev/null)" = storvsc_host ] || continue
    echo "host.\$(basename \$h).can_queue=\$(cat \$h/can_queue)"
    echo "host.\$(basename \$h).nr_hw_queues=\$(cat \$h/nr_hw_queues 2>/dev/null)"
  done
  for d in \$DISKS; do
    q=/sys/block/\$d/queue
    echo "disk.\$d.hw_queues=\$(ls -d /sys/block/\$d/mq/*/ | wc -l)"
    echo "disk.\$d.hctx_flags=\$(cat /sys/kernel/debug/block/\$d/hctx0/flags 2>/dev/null)"
    echo "disk.\$d.queue_depth=\$(cat /sys/block/\$d/device/queue_depth)"
    for k in scheduler nr_requests max_sectors_kb read_ahead_kb wbt_lat_usec; do
      echo "disk.\$d.\$k=\$(cat \$q/\$k 2>/dev/null)"
    done
  done
} > "\$R/header"
mkdir -p "\$R/logs"
cd "\$R/logs" || fail "no \$R/logs"
cat > /tmp/job.fio <<'HVSTOR_JOB_END'
$JOB
HVSTOR_JOB_END
cp /tmp/job.fio "\$R/job.fio"
echo "hvstor-exp: fio running on \$DISKS (\$(nproc) CPUs, \$(ls -d /sys/block/\$(echo \$DISKS | cut -d' ' -f1)/mq/*/ | wc -l) hardware queues)"
fio --output-format=json --output="\$R/fio.json" /tmp/job.fio > "\$R/fio.out" 2>&1
st=\$?
if [ \$st != 0 ]; then tail -n 20 "\$R/fio.out"; fail "fio exited with status \$st"; fi
echo "hvstor-exp: fio done"
EOF
}

# --- checks of one run ---------------------------------------------------------------------
hdr() { sed -n "s/^$2=//p" "$1/header" | head -n 1; }

# Prints why a run's results are not what the variant asked for (nothing when fine).
check_run() {
  local v=$1 res=$2 p k val got
  [ -f "$res/header" ] || { echo "the guest wrote no header"; return; }
  [ "$(hdr "$res" module.loaded)" = yes ] || { echo "hv_storvsc is not loaded in the guest"; return; }
  got=$(hdr "$res" module.version)
  if [ -n "${V_VERSION[$v]}" ]; then
    [ "$got" = "${V_VERSION[$v]}" ] ||
      { echo "the guest loaded hv_storvsc '${got:-stock}', not the module built for this variant (${V_VERSION[$v]})"; return; }
  else
    [ -z "$got" ] || { echo "the guest loaded an out-of-tree hv_storvsc ($got), the variant wants the stock one"; return; }
  fi
  for p in ${V_PARAMS[$v]}; do
    k=${p%%=*} val=${p#*=}
    case $k in hv_storvsc.*) k=${k#hv_storvsc.} ;; *.*) continue ;; esac
    got=$(hdr "$res" "param.$k")
    [ "$got" = "$val" ] || { echo "hv_storvsc parameter $k is '$got' in the guest, the variant sets $val"; return; }
  done
  [ -s "$res/fio.json" ] || { echo "no fio.json"; return; }
}

# Per-run rows: variant rep job dir iops bw_bytes clat_mean_ns ios (unscaled).
summarize_run() {
  local v=$1 rep=$2 json=$3
  sed -n '/^{/,$p' "$json" | jq -r --arg v "$v" --arg r "$rep" '
    [.jobs[].jobname] as $order
    | .jobs | group_by(.jobname) | sort_by(.[0].jobname as $n | $order | index($n))[] as $g
    | ("read", "write", "trim") as $d
    | ($g | map(.[$d].total_ios // 0) | add) as $n
    | select($n > 0)
    | [$v, $r, $g[0].jobname, $d,
       ($g | map(.[$d].iops) | add),
       ($g | map(.[$d].bw_bytes) | add),
       (($g | map(.[$d].clat_ns.mean * .[$d].total_ios) | add) / $n),
       $n] | @tsv'
}

# Prints what went wrong in a run, with what the guest said, and stops the experiment.
report_failure() {
  local v=$1 rep=$2 run=$3 why=$4 panic
  {
    printf '\n[hvstor] error: %s, repetition %s: %s\n' "$v" "$rep" "$why"
    printf -- '--- boot.sh and the guest command (%s) ---\n' "$run/output.log"
    sed '/^--- QEMU output ---$/,$d; /^--- last 60 lines of the guest console ---$/,$d' "$run/output.log" | tail -n 25
    sed -n '/^--- QEMU output ---$/,/^--- last 60 lines/p' "$run/output.log" | sed '$d' | head -n 21
    panic=$(clean_console "$run/console.log" | grep -m 6 -E 'Kernel panic|BUG:|Oops|general protection|modprobe .* failed|Unknown symbol|disagrees about version|exec format' || true)
    [ -z "$panic" ] || printf -- '--- the guest console says ---\n%s\n' "$panic"
    printf -- '--- last 25 lines of the guest console (%s) ---\n' "$run/console.log"
    clean_console "$run/console.log" | tail -n 25
    if [ -f "$run/results/header" ]; then printf -- '--- guest header ---\n'; cat "$run/results/header"; fi
    printf -- '---\n'
  } >&2
  die "experiment $EXP_NAME stopped: $v, repetition $rep: $why"
}

# The console without carriage returns and terminal escapes (SeaBIOS clears the screen).
clean_console() {
  [ -f "$1" ] || return 0
  sed -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1b[A-Za-z]//g' -e 's/\r//g' "$1"
}

# --- main --------------------------------------------------------------------------------
DEFAULT_OUT=0
if [ -z "$OUT" ]; then
  OUT=$HVSTOR_CACHE/results/$EXP_NAME-$(date +%Y%m%d-%H%M%S)
  DEFAULT_OUT=1
fi
prepare_variants

# Shell quoting that leaves QEMU option strings readable.
shq() {
  if [[ $1 =~ ^[A-Za-z0-9_./=,:+@%-]+$ ]]; then printf '%s' "$1"; else printf '%q' "$1"; fi
}

if [ "$DRY" = 1 ]; then
  for v in "${VARIANTS[@]}"; do
    echo "== variant $v: ${V_SUMMARY[$v]}"
    printf 'scripts/boot.sh --kernel %s --vcpus %s --mem %s --timeout %s --wait-disks %s' \
      "${V_KERNEL[$v]}" "${V_VCPUS[$v]}" "${V_MEM[$v]}" "${V_TIMEOUT[$v]}" "${#DISK_IDS[@]}"
    [ -z "${V_KO[$v]}" ] || printf ' --ko %s' "$(shq "${V_KO[$v]}")"
    [ -z "${V_APPEND[$v]}" ] || printf ' --append %s' "$(shq "${V_APPEND[$v]}")"
    printf ' --results DIR --cmd SCRIPT --'
    while IFS= read -r a; do printf ' %s' "$(shq "$a")"; done <<<"${V_DEVS[$v]}"
    echo
  done
  echo "== guest script (variant ${VARIANTS[0]})"
  guest_script "${VARIANTS[0]}"
  exit 0
fi

ensure_tools
# QEMU from the environment (tests/run-all.sh exports the one it built), else built here.
if [ -n "${QEMU:-}" ]; then
  [ -x "$QEMU" ] || die "QEMU=$QEMU is not an executable"
else
  QEMU=$(bash "$HVSTOR_ROOT/scripts/build-qemu.sh" | tail -n 1) || die "building QEMU failed"
fi

mkdir -p "$OUT/runs"
[ "$DEFAULT_OUT" = 0 ] || ln -sfn "$OUT" "$HVSTOR_CACHE/results/$EXP_NAME-latest"
cp "$SPEC" "$OUT/spec.exp"
for i in "${!DISK_IDS[@]}"; do
  [ "${S["disk.$i|file"]:-}" != scratch ] || truncate -s "${S["disk.$i|size"]:?[disk] file = scratch needs a size}" "$OUT/disk$i.img"
done
# shellcheck disable=SC2064
trap "rm -f '$OUT'/disk*.img" EXIT

eff_scale=1
scale_note="time-scale $SCALE"
if [ "$PERF_USED" = 1 ] || [ "$VMPERF_USED" = 1 ]; then
  eff_scale=$SCALE
  [ "$SCALE" = 1 ] || scale_note="time-scale $SCALE: rates x$SCALE, latencies and times /$SCALE"
else
  scale_note="no perf model in the spec: results as measured"
  [ "$SCALE" = 1 ] || scale_note="$scale_note (time-scale $SCALE ignored: it only applies to perf strings)"
fi
{
  printf 'kv\tname\t%s\n' "$EXP_NAME"
  printf 'kv\tdescription\t%s\n' "$(exp description)"
  printf 'kv\tscale\t%s\n' "$eff_scale"
  printf 'kv\tscale-note\t%s\n' "$scale_note"
  printf 'kv\treps\t%s\n' "$REPS"
  printf 'kv\tfio-seconds\t%s\n' "$FIO_SECS"
  printf 'kv\tlog-avg-msec\t%s\n' "$LOG_AVG"
  printf 'kv\tvm\t%s\n' "$(for v in "${VARIANTS[@]}"; do echo "${V_KERNEL[$v]}, ${V_VCPUS[$v]} vCPUs, ${V_MEM[$v]}"; done | sort -u | paste -sd '/')"
  for v in "${VARIANTS[@]}"; do
    printf 'variant\t%s\t%s\t%s\t%s\n' "$v" "${V_SUMMARY[$v]}" "$(var "$v" published)" "$(var "$v" published-ratio)"
  done
} > "$OUT/meta.tsv"
: > "$OUT/summary.tsv"

total=$((REPS * ${#VARIANTS[@]}))
log "experiment $EXP_NAME: ${#VARIANTS[@]} variants x $REPS repetitions = $total boots, about ${FIO_SECS}s of fio each; results in $OUT"
k=0 started=$SECONDS
for ((rep = 1; rep <= REPS; rep++)); do
  for v in "${VARIANTS[@]}"; do
    k=$((k + 1))
    run=$OUT/runs/$v/rep$rep
    rm -rf "$run"; mkdir -p "$run"
    args=(--qemu "$QEMU" --kernel "${V_KERNEL[$v]}" --vcpus "${V_VCPUS[$v]}" --mem "${V_MEM[$v]}"
          --timeout "${V_TIMEOUT[$v]}" --wait-disks "${#DISK_IDS[@]}" --log "$run/console.log"
          --results "$run/results" --append "hvstor.wait_secs=30")
    [ -z "${V_KO[$v]}" ] || args+=(--ko "${V_KO[$v]}")
    [ -z "${V_APPEND[$v]}" ] || args+=(--append "${V_APPEND[$v]}")
    mapfile -t devs <<<"${V_DEVS[$v]}"
    eta=''
    if [ "$k" -gt 1 ]; then
      eta=", about $(( (SECONDS - started) * (total - k + 1) / (k - 1) ))s left"
    fi
    log "[$k/$total] $v, repetition $rep/$REPS: booting${eta}"
    t0=$SECONDS rc=0
    HVSTOR_BOOT_QUIET=1 bash "$HVSTOR_ROOT/scripts/boot.sh" "${args[@]}" --cmd "$(guest_script "$v")" -- "${devs[@]}" \
      >"$run/output.log" 2>&1 || rc=$?
    res=$run/results
    why=''
    if [ "$rc" != 0 ]; then
      if [ -s "$res/error" ]; then
        why="the guest command failed: $(cat "$res/error")"
      else
        why=$(sed -n 's/^\[hvstor\] error: //p' "$run/output.log" | head -n 1)
        why=${why:-the boot failed with status $rc}
      fi
    else
      why=$(check_run "$v" "$res")
    fi
    [ -z "$why" ] || report_failure "$v" "$rep" "$run" "$why"
    summarize_run "$v" "$rep" "$res/fio.json" > "$run/summary.tsv" ||
      die "$v, repetition $rep: cannot read $res/fio.json"
    cat "$run/summary.tsv" >> "$OUT/summary.tsv"
    line=$(awk -F'\t' -v s="$eff_scale" '{ printf "%s%s %s %.0f IOPS %.1f MB/s %.2f ms", (NR > 1 ? "; " : ""), $3, $4, $5 * s, $6 * s / 1e6, $7 / s / 1e6 }' "$run/summary.tsv")
    log "[$k/$total] $v, repetition $rep: $((SECONDS - t0))s, hw queues $(sed -n 's/^disk\.[a-z]*\.hw_queues=//p' "$res/header" | head -n 1): $line"
  done
done

bash "$HVSTOR_ROOT/scripts/exp-report.sh" "$OUT"
log "experiment $EXP_NAME done in $((SECONDS - started))s: $OUT"
