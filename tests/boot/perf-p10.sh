# The performance model in a real guest (stock 6.12, TCG), Premium SSD P10 without
# bursting: 500 IOPS, lognormal read/write latency with p50 2 ms.
#  1. 4 KiB random read at QD32 measures 500 IOPS within 3%. The depth keeps a backlog of
#     about 60 ms at the cap, so a guest slowed by a busy host still keeps the disk
#     saturated (at QD8 one run measured 479 with two other processes on the two cores).
#  2. QD1 p50 latency within 10% of the profile's 2 ms as the model drew it (the timeline's
#     model_lat_ms: lat_ms less the time the host's timer thread woke late, which grows on a
#     busy host), with the profile's bursting left on: without it a QD1 reader at 2 ms
#     sits right at P10's 500 IOPS and the cap, not the latency, sets the pace (as on
#     Azure). The guest sees more: under TCG, waking the idle guest for each completion
#     adds 0.15-1 ms, more on a busy host. That is printed here and checked only for its
#     sign; its size depends on the machine's speed and belongs to ./hvstor bench.
#  3. A QD1 write behind a QD64 random-read load: with one FIFO it waits behind the queued
#     reads (Little's law: about 64 / 500 IOPS = 128 ms); with per-direction queues far less.
# QEMU's -device syntax doubles commas inside a property value.
. "$(dirname "$0")/../boot-lib.sh"

P10="profile=premium-p10,,burst=off"
export HVSTOR_BOOT_QUIET=1 # few kernel messages: the guest's time goes to fio
FIO_COMMON="--filename=/dev/sda --direct=1 --ioengine=libaio --bs=4k --size=1G --output-format=json"
FIGURE="python3 $HVSTOR_ROOT/tests/fio-json.py"
read -r -d '' GUEST <<SH
echo FIO-JSON-BEGIN qd32
fio --name=qd32 $FIO_COMMON --rw=randread --iodepth=32 --time_based --runtime=20 --ramp_time=3
echo FIO-JSON-END
SH
boot_guest --kernel debian-6.12 --vcpus 2 --wait-disks 1 --cmd "$GUEST" \
  -- -device hv-storvsc,id=s -device "hv-disk,bus=s.0,id=d0,backend=null,size=8G,perf=$P10"
check "guest command finished" [ "$BOOT_RC" = 0 ]
iops=$($FIGURE "$OUT" qd32 qd32 read.iops)
read -r -d '' QD1 <<SH
echo FIO-JSON-BEGIN qd1
fio --name=qd1 $FIO_COMMON --rw=randread --iodepth=1 --time_based --runtime=15
echo FIO-JSON-END
SH
TL=$WORK/timeline.jsonl
boot_guest --kernel debian-6.12 --vcpus 2 --wait-disks 1 --cmd "$QD1" \
  -- -device hv-storvsc,id=s -device "hv-disk,bus=s.0,id=d0,backend=null,size=8G,perf=profile=premium-p10,,timeline=$TL"
p50=$($FIGURE "$OUT" qd1 qd1 read.clat_p50_us)
# From the model's timeline, over the full intervals of the QD1 run (200 IOPS or more; the
# last line is cut short): the medians of the p50 as drawn and as served, and of how late
# the host's timer woke on average. One interval holds about 450 draws, whose p50 alone
# strays by 2% (one standard deviation); the median over the run's intervals far less.
read -r model_p50 served_p50 late < <(python3 -c '
import json, statistics, sys
lines = [json.loads(x) for x in open(sys.argv[1]) if x.strip()][:-1]
full = [l for l in lines if l["iops"] >= 200]
med = lambda f: round(statistics.median(f(l) for l in full) * 1000, 1) if full else 0
print(med(lambda l: l["model_lat_ms"]["p50"]), med(lambda l: l["lat_ms"]["p50"]), med(lambda l: l["late_ms"]["mean"]))' "$TL")
rm -f "$TL"
echo "  measured: QD32 $iops IOPS (want 500 +- 3%); QD1 p50: model ${model_p50} us (want 2000 +- 10%), served ${served_p50} us (timer ${late} us late on average), guest ${p50} us"
check "QD32 IOPS within 3% of 500" awk -v x="${iops:-0}" 'BEGIN { exit !(x >= 485 && x <= 515) }'
check "QD1 p50 as the model drew it within 10% of the profile's 2 ms" awk -v x="${model_p50:-0}" 'BEGIN { exit !(x >= 1800 && x <= 2200) }'
check "QD1 p50 in the guest: at least what the disk served" \
  awk -v g="${p50:-0}" -v d="${served_p50:-0}" 'BEGIN { exit !(g > 0 && g >= d) }'

hol() { # queue discipline -> mean write completion latency (us) of the QD1 writer
  local q=$1
  read -r -d '' G <<SH2
echo FIO-JSON-BEGIN hol
fio --name=hogs $FIO_COMMON --rw=randread --iodepth=64 --time_based --runtime=15 --ramp_time=3 \
    --name=wal $FIO_COMMON --offset=2G --rw=write --iodepth=1 --time_based --runtime=15 --ramp_time=3
echo FIO-JSON-END
SH2
  boot_guest --kernel debian-6.12 --vcpus 2 --wait-disks 1 --cmd "$G" \
    -- -device hv-storvsc,id=s \
       -device "hv-disk,bus=s.0,id=d0,backend=null,size=8G,perf=$P10,,queue=$q"
  $FIGURE "$OUT" hol wal write.clat_mean_us
}
fifo=$(hol fifo)
perdir=$(hol per-direction)
echo "  measured: QD1 write behind QD64 reads: FIFO ${fifo} us, per-direction ${perdir} us (Little: ~128000 us)"
check "FIFO: the write waits behind the reads (Little's law within 25%)" \
  awk -v x="${fifo:-0}" 'BEGIN { exit !(x >= 0.75 * 130000 && x <= 1.25 * 130000) }'
check "per-direction: far less (under a fifth of FIFO)" \
  awk -v a="${perdir:-0}" -v b="${fifo:-0}" 'BEGIN { exit !(a > 0 && a < b / 5) }'
finish
