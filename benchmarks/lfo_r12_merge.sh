#!/bin/bash
# Round 12 (docs/generalisation.md): the blends of rounds 9-11 with every member refitted on train +
# validation families (benchmarks/lfo_refit.sh), the GBMs refitted the same way, beside stage one.
#
#   PY=python bash benchmarks/lfo_r12_merge.sh i9|3090
#
# Run from the repository root.  Merges the refit reports when they are there (into
# benchmarks/data/lfo_r12_refit_<setting>.json), else reads that committed merge; then fits every
# blend: benchmarks/results/r12/m_r12_<i9|3090>.log and r12_merged_<i9|3090>.json.
set -e
R=benchmarks/results/r12; D=benchmarks/data; PY=${PY:-python}
mkdir -p $R
case "${1:-}" in
  i9) S=timm-i9; T=i9; RUNS="gs g q p a"
      A='seernet[readout=sum]@200ep-r7'; P=pmgns@200ep-r7; Q=pmgns-phys@200ep-r7; G=pmgns-physgrp@200ep-r7
      GS=pmgns-physgrp-steps@200ep-r7
      STAGE1="$D/lfo_timm-i9.json $D/lfo_r7_fast_timm-i9.json $D/lfo_r7_pmgns_timm-i9.json $D/lfo_r7_seernets_timm-i9.json
              $D/lfo_r10_physgrp_timm-i9.json $D/lfo_r11_physgrp_steps_timm-i9.json"
      blends() {  # members of each blend for label variant $1 ("" or R); the first is the card's recipe
        local a=$A$1-seedmean p=$P$1-seedmean q=$Q$1-seedmean g=$G$1-seedmean gs=$GS$1-seedmean
        BASES+="${BASES:+,}$A$1,$P$1,$Q$1,$G$1,$GS$1"
        for b in "$a $p $q $g" "$a $p $q $gs" "$a $p $g $gs" "$a $q $g $gs" "$p $q $g $gs" "$a $p $gs" \
                 "$a $q $gs" "$p $gs" "$a $gs" "$q $gs" "$p $q $gs"; do ST+="${ST:+,}${b// /+}"; done
      } ;;
  3090) S=timm-3090-infer; T=3090; RUNS="g q a s"
      A='seernet[readout=sum]'; SN=seernet; Q=pmgns-phys@200ep; G=pmgns-physgrp@200ep; GS=pmgns-physgrp-steps@200ep
      STAGE1="$D/lfo_timm-3090-infer.json $D/lfo_r6_gbmops_timm-3090-infer.json $D/lfo_phys_timm-3090-infer.json
              $D/lfo_r9_physgrp_timm-3090-infer.json $D/lfo_r11_physgrp_steps_timm-3090-infer.json"
      blends() {
        local a=$A$1 s=$SN$1 q=$Q$1-seedmean g=$G$1-seedmean
        BASES+="${BASES:+,}$Q$1,$G$1"
        for b in "$a $s $q $g" "$a $q $g" "$s $q $g" "$q $g" "$a $s $g"; do ST+="${ST:+,}${b// /+}"; done
      } ;;
  *) echo "usage: bash benchmarks/lfo_r12_merge.sh i9|3090" >&2; exit 2 ;;
esac
if [[ -f $R/lfo_${T}_g_refit_s0.json ]]; then
  files=$(for r in $RUNS; do ls $R/lfo_${T}_${r}_refit_s?.json; done)
  $PY benchmarks/leave_families_out.py --merge $files $R/lfo_${T}_gbm_refit.json \
    --json $D/lfo_r12_refit_$S.json > $R/m_r12_${T}_refits.log
fi
# the replicate with other initial weights (TAG=Rb SEED_OFFSET=10 ONLY="g q p a" benchmarks/lfo_refit.sh i9)
if [[ $T == i9 && -f $R/lfo_i9_g_refitb_s0.json ]]; then
  $PY benchmarks/leave_families_out.py --merge $R/lfo_i9_{g,q,p,a}_refitb_s?.json \
    --json $D/lfo_r12_refitb_$S.json > $R/m_r12_i9_refitsb.log
fi
BASES=""; ST=""; EXTRA=""
blends ""; blends R
if [[ $T == i9 && -f $D/lfo_r12_refitb_$S.json ]]; then  # its card blend only (it has no GS member)
  BASES+=",${A}Rb,${P}Rb,${Q}Rb,${G}Rb"; ST+=",${A}Rb-seedmean+${P}Rb-seedmean+${Q}Rb-seedmean+${G}Rb-seedmean"
  EXTRA=$D/lfo_r12_refitb_$S.json
fi
$PY benchmarks/leave_families_out.py --merge $STAGE1 $D/lfo_r12_refit_$S.json $EXTRA --seed-mean "$BASES" --shift \
  --stack "$ST" --json $R/r12_merged_$T.json > $R/m_r12_$T.log
echo "merged $S"
