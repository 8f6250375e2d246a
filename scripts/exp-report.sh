#!/usr/bin/env bash
# Comparison table and plots of an experiment's results folder (run-experiment.sh writes
# it and calls this at the end; run it again to redo the report).
#
#   scripts/exp-report.sh RESULTS_DIR
#
# Reads meta.tsv (variants, scale, published figures), summary.tsv (one row per run, job
# and direction: variant rep job dir iops bw_bytes clat_mean_ns ios) and the fio logs under
# runs/<variant>/rep<N>/results/logs/. Writes report.txt (also printed) and, per fio job and
# direction, plots/<job>-<dir>-iops.png and plots/<job>-<dir>-clat.png: one line per
# variant, the mean over repetitions of each log-avg-msec interval (IOPS summed over a
# job's clones, completion latency averaged).
# Figures are scaled back by the experiment's time scale (rates x scale, latencies and
# times / scale) when a perf model was in use; meta.tsv says which.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

[ $# = 1 ] || { echo "usage: scripts/exp-report.sh RESULTS_DIR" >&2; exit 2; }
DIR=$1
[ -f "$DIR/meta.tsv" ] && [ -f "$DIR/summary.tsv" ] || die "$DIR holds no experiment results (meta.tsv, summary.tsv)"
[ -s "$DIR/summary.tsv" ] || die "$DIR/summary.tsv is empty: no run finished"

meta() { awk -F'\t' -v k="$1" '$1 == "kv" && $2 == k { print $3; exit }' "$DIR/meta.tsv"; }
SCALE=$(meta scale); SCALE=${SCALE:-1}
AVG=$(meta log-avg-msec); AVG=${AVG:-1000}
mapfile -t VARIANTS < <(awk -F'\t' '$1 == "variant" { print $2 }' "$DIR/meta.tsv")

# --- what the guests reported (first repetition of each variant) ------------------------------
guest_facts() {
  local h=$1 d sched
  d=$(sed -n 's/^disk\.\([a-z]*\)\.hw_queues=.*/\1/p' "$h" | head -n 1)
  g() { sed -n "s/^$1=//p" "$h" | head -n 1; }
  sched=$(g "disk\.$d\.scheduler" | sed -n 's/.*\[\(.*\)\].*/\1/p')
  printf '%s hw queues, %s channels, can_queue %s, queue_depth %s, nr_requests %s, scheduler %s, shared tags %s, storvsc_max_hw_queues=%s, hv_storvsc %s' \
    "$(g "disk\.$d\.hw_queues")" "$(g vmbus\.channels)" "$(g 'host\.host[0-9]*\.can_queue')" \
    "$(g "disk\.$d\.queue_depth")" "$(g "disk\.$d\.nr_requests")" "${sched:-none}" \
    "$(g "disk\.$d\.hctx_flags" | grep -q TAG_HCTX_SHARED && echo yes || echo no)" \
    "$(g param\.storvsc_max_hw_queues)" "$(v=$(g module\.version); echo "${v:-stock}")"
}
FACTS=$DIR/guest-facts.tsv
: > "$FACTS"
for v in "${VARIANTS[@]}"; do
  h=$(find "$DIR/runs/$v" -path '*/results/header' 2>/dev/null | sort | head -n 1)
  [ -z "$h" ] || printf '%s\t%s\n' "$v" "$(guest_facts "$h")" >> "$FACTS"
done

# --- the table -----------------------------------------------------------------------------
awk -F'\t' -v scale="$SCALE" -v facts="$FACTS" '
  FNR == NR {
    if ($1 == "kv") kv[$2] = $3
    if ($1 == "variant") {
      nv++; vname[nv] = $2; vsum[$2] = $3
      parse_pub($2, $4, pub); parse_pub($2, $5, pubr)
    }
    next
  }
  {
    v = $1; key = $3 SUBSEP $4
    if (!(key in seenk)) { seenk[key] = 1; nk++; keys[nk] = key }
    c = ++cnt[key, v]
    iops[key, v, c] = $5 * scale
    bw[key, v, c] = $6 * scale / 1e6
    lat[key, v, c] = $7 / scale / 1e6
  }
  # "job.dir.metric=value ..." into arr[variant, job, dir, metric]
  function parse_pub(v, s, arr,    n, i, items, kvp, k, val, m, d, j) {
    n = split(s, items, /[ \t]+/)
    for (i = 1; i <= n; i++) {
      if (items[i] == "") continue
      if (split(items[i], kvp, "=") != 2) continue
      k = kvp[1]; val = kvp[2]
      if (!match(k, /\.[a-z]+\.[a-z]+$/)) continue
      j = substr(k, 1, RSTART - 1)
      split(substr(k, RSTART + 1), md, ".")
      arr[v, j, md[1], md[2]] = val
    }
  }
  function mean(a, key, v, n,    i, s) { s = 0; for (i = 1; i <= n; i++) s += a[key, v, i]; return n ? s / n : 0 }
  function sd(a, key, v, n, m,    i, s) {
    if (n < 2) return -1
    s = 0; for (i = 1; i <= n; i++) s += (a[key, v, i] - m) ^ 2
    return sqrt(s / (n - 1))
  }
  function fmt(x, d) { return sprintf("%." d "f", x) }
  function sdf(x, d) { return x < 0 ? "-" : fmt(x, d) }
  function unit(m) { return m == "iops" ? " IOPS" : m == "bw" ? " MB/s" : m == "lat" ? " ms" : " " m }
  END {
    base = vname[1]
    printf "Experiment %s: %s\n", kv["name"], kv["description"]
    printf "%s; %s repetition(s) of about %s s of fio; %s\n", kv["vm"], kv["reps"], kv["fio-seconds"], kv["scale-note"]
    printf "variants:\n"
    for (i = 1; i <= nv; i++)
      printf "  %-14s %s%s\n", vname[i], vsum[vname[i]], (i == 1 ? "  (baseline)" : "")
    hdr = 0
    while ((getline line < facts) > 0) {
      if (!hdr) { printf "in the guest:\n"; hdr = 1 }
      split(line, fv, "\t"); printf "  %-14s %s\n", fv[1], fv[2]
    }
    printf "Mean over repetitions and its sample standard deviation; x = ratio to %s'"'"'s mean.\n", base
    printf "clat = mean completion latency; MB/s = 10^6 bytes per second.\n"
    for (q = 1; q <= nk; q++) {
      key = keys[q]; split(key, kd, SUBSEP); job = kd[1]; dir = kd[2]
      printf "\n%s (%s)\n", job, dir
      printf "  %-14s %4s %10s %9s %10s %9s %9s %9s %7s %7s   %s\n", "variant", "runs", "IOPS", "sd", "MB/s", "sd", "clat ms", "sd", "IOPS x", "clat x", "published"
      bi = mean(iops, key, base, cnt[key, base]); bl = mean(lat, key, base, cnt[key, base])
      for (i = 1; i <= nv; i++) {
        v = vname[i]; n = cnt[key, v]
        if (!n) { printf "  %-14s %4d   (no data)\n", v, 0; continue }
        mi = mean(iops, key, v, n); mb = mean(bw, key, v, n); ml = mean(lat, key, v, n)
        p = ""
        for (m = 1; m <= 3; m++) {
          met = (m == 1 ? "iops" : m == 2 ? "bw" : "lat")
          if ((v, job, dir, met) in pub) p = p (p == "" ? "" : ", ") pub[v, job, dir, met] unit(met)
          if ((v, job, dir, met) in pubr) p = p (p == "" ? "" : ", ") (met == "iops" ? "IOPS" : met == "bw" ? "MB/s" : "clat") " x" pubr[v, job, dir, met]
        }
        printf "  %-14s %4d %10s %9s %10s %9s %9s %9s %7s %7s   %s\n", v, n,
          fmt(mi, 1), sdf(sd(iops, key, v, n, mi), 1), fmt(mb, 2), sdf(sd(bw, key, v, n, mb), 2),
          fmt(ml, 3), sdf(sd(lat, key, v, n, ml), 3),
          (bi > 0 ? fmt(mi / bi, 2) : "-"), (bl > 0 ? fmt(ml / bl, 2) : "-"), p
      }
    }
    # Published ratios against the measured ones.
    hdr = 0
    for (k in pubr) {
      split(k, pk, SUBSEP); v = pk[1]; job = pk[2]; dir = pk[3]; met = pk[4]
      key = job SUBSEP dir
      arr_ok = (met == "iops" || met == "bw" || met == "lat")
      if (!arr_ok) continue
      if (!hdr) { printf "\nPublished against measured (ratio to %s):\n", base; hdr = 1 }
      nb = cnt[key, base]; nv2 = cnt[key, v]
      if (!nb || !nv2) { printf "  %s %s %s %s: published x%s, measured: no data\n", job, dir, met, v, pubr[k]; continue }
      if (met == "iops") { a = mean(iops, key, v, nv2); b = mean(iops, key, base, nb) }
      else if (met == "bw") { a = mean(bw, key, v, nv2); b = mean(bw, key, base, nb) }
      else { a = mean(lat, key, v, nv2); b = mean(lat, key, base, nb) }
      printf "  %s (%s) %s, %s / %s: published x%s, measured x%s\n", job, dir,
        (met == "iops" ? "IOPS" : met == "bw" ? "MB/s" : "clat"), v, base, pubr[k], (b > 0 ? fmt(a / b, 2) : "-")
    }
  }
' "$DIR/meta.tsv" "$DIR/summary.tsv" > "$DIR/report.txt"

# --- plots ---------------------------------------------------------------------------------
PLOTS=$DIR/plots
rm -rf "$PLOTS"
mkdir -p "$PLOTS/data"
term=pngcairo
gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1 </dev/null || term=png

# series TYPE VARIANT JOB DIRNUM: prints "seconds value" rows, the mean over repetitions.
series() {
  local type=$1 v=$2 job=$3 dnum=$4 files=()
  local f
  for f in "$DIR/runs/$v"/rep*/results/logs/"${job}_${type}".*.log; do
    [ -f "$f" ] && files+=("$f")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  awk -F', *' -v type="$type" -v avg="$AVG" -v scale="$SCALE" -v d="$dnum" '
    $3 != d { next }
    {
      match(FILENAME, /\/rep[0-9]+\//); r = substr(FILENAME, RSTART + 4, RLENGTH - 5)
      b = int(($1 + avg / 2) / avg)
      if (b > maxb) maxb = b
      if (type == "iops") { s[r, b] += $2; reps[r] = 1 }
      else { s[b] += $2; n[b]++ }
    }
    END {
      for (b = 1; b <= maxb; b++) {
        if (type == "iops") {
          t = 0; c = 0
          for (r in reps) if ((r, b) in s) { t += s[r, b]; c++ }
          if (c) printf "%g %g\n", b * avg / 1000 / scale, t / c * scale
        } else if (n[b]) {
          printf "%g %g\n", b * avg / 1000 / scale, s[b] / n[b] / scale / 1e6
        }
      }
    }' "${files[@]}"
}

plot() { # TYPE JOB DIR
  local type=$1 job=$2 dir=$3 dnum v dat ylabel what name cmds=() safe
  case $dir in read) dnum=0 ;; write) dnum=1 ;; trim) dnum=2 ;; *) return 0 ;; esac
  safe=$(printf '%s' "$job" | tr -c 'A-Za-z0-9._-' _)
  if [ "$type" = iops ]; then ylabel=IOPS what="IOPS"; name=iops
  else ylabel="mean completion latency (ms)" what="completion latency"; name=clat; fi
  for v in "${VARIANTS[@]}"; do
    dat=$PLOTS/data/$safe-$dir-$name-$v.dat
    series "$type" "$v" "$job" "$dnum" > "$dat"
    [ -s "$dat" ] || continue
    cmds+=("'$dat' using 1:2 with linespoints lw 2 pt 7 ps 0.5 title '$v'")
  done
  if [ ${#cmds[@]} -eq 0 ]; then
    log "no fio ${type} logs for $job ($dir): no plot"
    return 0
  fi
  local IFS=,
  gnuplot <<EOF 2>"$PLOTS/data/gnuplot.err" || { cat "$PLOTS/data/gnuplot.err" >&2; die "gnuplot failed"; }
set terminal $term size 1000,520 noenhanced
set output '$PLOTS/$safe-$dir-$name.png'
set title "$(meta name): $job ($dir), $what over time (mean of repetitions)"
set xlabel "time (s)"
set ylabel "$ylabel"
set yrange [0:*]
set grid
set key below
plot ${cmds[*]}
EOF
}

while IFS=$'\t' read -r job dir; do
  plot iops "$job" "$dir"
  plot clat "$job" "$dir"
done < <(awk -F'\t' '!seen[$3 FS $4]++ { print $3 "\t" $4 }' "$DIR/summary.tsv")

{
  echo
  echo "Plots:"
  find "$PLOTS" -maxdepth 1 -name '*.png' | sort | sed 's/^/  /'
  echo "Runs (header, fio.json, fio logs, console): $DIR/runs"
} >> "$DIR/report.txt"
cat "$DIR/report.txt"
