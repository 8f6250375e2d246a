#!/usr/bin/env bash
# Benchmark (not a test): guest 4 KiB random-read IOPS at QD32 through hv-storvsc and
# through virtio-scsi, in the same QEMU build, same guest kernel, null backends, under
# TCG. Prints each run, the medians and the ratio hv-storvsc / virtio-scsi.
#
#   scripts/bench-iops.sh [--kernel debian-6.12] [--vcpus 2] [--runtime 15] [--reps 3]
set -euo pipefail
. "$(dirname "$0")/lib.sh"

KERNEL=debian-6.12 VCPUS=2 RUNTIME=15 REPS=3
while [ $# -gt 0 ]; do
  case $1 in
    --kernel) KERNEL=$2; shift 2 ;;
    --vcpus) VCPUS=$2; shift 2 ;;
    --runtime) RUNTIME=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
QEMU=$(bash "$HVSTOR_ROOT/scripts/build-qemu.sh" | tail -n 1)

FIO="fio --name=bench --filename=/dev/sda --direct=1 --ioengine=libaio --iodepth=32 --rw=randread \
--bs=4k --time_based --runtime=$RUNTIME --ramp_time=2 --size=4G --output-format=terse --terse-version=3"

run_one() { # label, qemu device args...
  local label=$1; shift
  local out iops
  out=$(bash "$HVSTOR_ROOT/scripts/boot.sh" --qemu "$QEMU" --kernel "$KERNEL" --vcpus "$VCPUS" \
        --timeout $((RUNTIME + 120)) --wait-disks 1 --append "hvstor.modules=virtio_pci,virtio_scsi" \
        --cmd "$FIO" -- "$@" 2>/dev/null) || die "$label run failed: $out"
  # terse v3: field 8 is read IOPS.
  iops=$(grep -E '^3;' <<<"$out" | head -n 1 | cut -d';' -f8)
  [ -n "$iops" ] || die "$label: no fio result in: $out"
  echo "$iops"
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2] + a[NR/2+1]) / 2)}'; }

declare -a hv=() vs=()
for ((i = 1; i <= REPS; i++)); do
  h=$(run_one hv-storvsc -device hv-storvsc,id=s -device hv-disk,bus=s.0,backend=null,size=8G)
  v=$(run_one virtio-scsi -blockdev driver=null-aio,node-name=nul,size=8589934592 \
        -device virtio-scsi-pci,id=vs -device scsi-hd,bus=vs.0,drive=nul)
  log "rep $i: hv-storvsc $h IOPS, virtio-scsi $v IOPS"
  hv+=("$h"); vs+=("$v")
done
mh=$(printf '%s\n' "${hv[@]}" | median)
mv=$(printf '%s\n' "${vs[@]}" | median)
echo
echo "4 KiB random read, QD32, $VCPUS vCPUs, $KERNEL, TCG, null backends, ${RUNTIME}s x $REPS"
printf '  %-12s median %8s IOPS   runs: %s\n' hv-storvsc "$mh" "${hv[*]}"
printf '  %-12s median %8s IOPS   runs: %s\n' virtio-scsi "$mv" "${vs[*]}"
awk -v a="$mh" -v b="$mv" 'BEGIN { printf "  ratio hv-storvsc / virtio-scsi: %.2f\n", a / b }'
